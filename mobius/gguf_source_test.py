"""GGUF input (mobius/gguf_source.py): tiny GGUF files written as llama.cpp writes them
(testing/gguf_files.py), built by mobius and compared with transformers' own GGUF
loading of the same file (it dequantizes with gguf and undoes llama.cpp's q/k
permutation itself).

- float builds (F32 / F16 / BF16; Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K
  dequantized): logits within 1e-4
  (Gemma 1, which transformers does not read from GGUF: against the checkpoint
  the file was written from);
- Q8_0 / Q4_0 built as int8 / int4: every MatMulNBits weight, dequantized, equals
  transformers' dequantized weight bit for bit (nothing requantized), and the
  logits agree within 1e-5 of their scale at accuracy level 1 (f32 activations),
  within 2 % at the CPU EP's default level 4 (int8 activations);
- unknown types refused by name; the CLI takes a .gguf file and a folder holding one;
- the package's tokenizer encodes like the checkpoint's and like transformers' GGUF
  tokenizer, byte-level BPE and SentencePiece alike.
"""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from testing.gguf_files import write_gguf
from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint
from testing.model_runs import BuiltPackage, f32_parity

#: tiny checkpoints: every dimension a multiple of 32 (one Q4_0 / Q8_0 block) where
#: blocks run, 256 for the k-quant case; qwen2 has q/k/v biases, llama q/k permuted,
#: phi3 fused qkv_proj / gate_up_proj, qwen3 q/k norms, gemma norms stored plus one
#: and sliding windows shorter than the prompt
PRESETS = {"llama": ("tiny-llama", dict(intermediate_size=96)),
           "qwen2": ("tiny-qwen2", dict(intermediate_size=96)),
           "phi3": ("tiny-phi3", dict(intermediate_size=96)),
           # transformers' GGUF loader reads no head_dim for qwen3 (it keeps 128)
           "qwen3": ("tiny-qwen3", dict(intermediate_size=96, head_dim=128)),
           "llama-256": ("tiny-llama", dict(hidden_size=256, intermediate_size=256,
                                            num_hidden_layers=1)),
           # transformers' GGUF loader keeps query_pre_attn_scalar 256: llama.cpp scales
           # by head_dim, so head_dim 256; gemma3: 6 layers, the 6th global (llama.cpp's)
           "gemma2": ("tiny-gemma2", dict(intermediate_size=96, head_dim=256,
                                          query_pre_attn_scalar=256)),
           "gemma3": ("tiny-gemma3", dict(intermediate_size=96, head_dim=256,
                                          query_pre_attn_scalar=256, sliding_window=4,
                                          num_hidden_layers=6, layer_types=None)),
           "gemma": ("tiny-gemma", dict(intermediate_size=96))}
#: transformers reads no GGUF of these: the reference is the checkpoint it was written from
NO_TRANSFORMERS_GGUF = ("gemma",)


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    made = {}

    def get(preset: str, qtype: str, types: dict | None = None) -> str:
        key = (preset, qtype, json.dumps(types))
        if key not in made:
            hf = root / f"{preset}-hf"
            if not hf.exists():
                name, overrides = PRESETS[preset]
                make_hf_checkpoint(str(hf), name, **overrides)
            folder = root / f"{preset}-{qtype}-{len(made)}"
            folder.mkdir()
            made[key] = write_gguf(str(hf), str(folder / "model.gguf"), qtype, types)
        return made[key]

    return get


def _reference(path: str):
    import torch
    import transformers

    folder, name = os.path.split(path)
    return transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32).eval()


def _session(path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _parity(path: str, tmp_path, preset: str, **options):
    from mobius.builder import build

    package = build(path, execution_provider="cpu", prefill_logits="all", **options)
    out = package.save(str(tmp_path / "onnx"))
    if preset in NO_TRANSFORMERS_GGUF:
        reference = load_hf_model(os.path.join(os.path.dirname(os.path.dirname(path)),
                                               f"{preset}-hf"))
    else:
        reference = _reference(path)
    run = f32_parity(BuiltPackage(out, package.config, "f32"), reference,
                     session=_session(f"{out}/model.onnx"), pad=0, steps=2)
    _check_finite(run)
    return out, reference, run


def _check_finite(run) -> None:
    """parity.compare_logits' max() skips NaN: a NaN model must fail here instead."""
    for step in (*run.onnx_steps, *run.hf_steps):
        assert np.isfinite(step).all()


@pytest.mark.parametrize("preset, qtype, types", [
    ("llama", "F32", None), ("llama", "F16", None), ("llama", "BF16", None),
    ("llama", "Q4_0", None),
    ("qwen2", "F32", None), ("qwen2", "Q8_0", None), ("phi3", "F32", None),
    ("qwen3", "F32", None), ("gemma2", "Q4_0", None), ("gemma3", "Q8_0", None),
    ("gemma", "F32", None),
    ("llama-256", "F32", {"blk.0.ffn_down.weight": "Q6_K", "blk.0.ffn_up.weight": "Q4_K",
                          "blk.0.ffn_gate.weight": "Q5_K", "blk.0.attn_q.weight": "Q5_0",
                          "blk.0.attn_k.weight": "Q5_1", "blk.0.attn_v.weight": "Q4_1"}),
])
def test_float_build_matches_transformers_gguf_loading(gguf_file, tmp_path, preset, qtype, types):
    _, _, run = _parity(gguf_file(preset, qtype, types), tmp_path, preset)
    assert run.max_abs_diff <= 1e-4, run.max_abs_diff


@pytest.mark.parametrize("preset, qtype, quant", [
    ("llama", "Q4_0", "int4"), ("llama", "Q8_0", "int8"), ("qwen2", "Q4_0", "int4"),
    ("phi3", "Q4_0", "int4"), ("gemma2", "Q4_0", "int4"), ("gemma3", "Q8_0", "int8"),
])
def test_q4_0_and_q8_0_are_carried_into_matmulnbits(gguf_file, tmp_path, caplog, preset, qtype,
                                                    quant):
    # the token table and the head are read as floats (requantized if quantized): kept float
    with caplog.at_level(logging.WARNING, "mobius.quantize.prequantized"):
        out, reference, run = _parity(gguf_file(preset, qtype), tmp_path, preset, quant=quant,
                                      quant_accuracy_level=1, quant_lm_head=False,
                                      quant_embedding=False)
    assert not caplog.records, [r.message for r in caplog.records]  # nothing requantized
    scale = max(float(np.abs(step).max()) for step in run.hf_steps)
    assert run.max_abs_diff <= 1e-5 * scale, (run.max_abs_diff, scale)
    model = onnx.load(f"{out}/model.onnx")
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    layers = PRESETS[preset][1].get("num_hidden_layers", 2)
    linears = sum(3 if "qkv_proj" in n.input[1] else 1 for n in nodes)  # packed q/k/v: 3
    assert linears == layers * 7  # q, k, v, o, gate, up, down: every one carried
    for node in nodes:
        got = _dequantized(node, inits)
        np.testing.assert_array_equal(got, _expected(reference, node.input[1]))


def test_carried_q4_0_at_the_cpu_default_accuracy_level(gguf_file, tmp_path):
    """The CPU EP's default form (accuracy level 4: activations quantized to int8 per
    block) stays within 2 % of the logit scale (measured: 0.7 %); a wrong block, scale
    or row order is off by the whole scale."""
    import onnxruntime as ort

    from mobius.builder import build

    path = gguf_file("llama", "Q4_0")
    package = build(path, execution_provider="cpu", prefill_logits="all", quant="int4")
    out = package.save(str(tmp_path / "onnx"))
    session = ort.InferenceSession(f"{out}/model.onnx", providers=["CPUExecutionProvider"])
    run = f32_parity(BuiltPackage(out, package.config, "f32"), _reference(path),
                     session=session, pad=0, steps=2)
    _check_finite(run)
    scale = max(float(np.abs(step).max()) for step in run.hf_steps)
    assert run.max_abs_diff <= 2e-2 * scale, (run.max_abs_diff, scale)


def _dequantized(node, inits) -> np.ndarray:
    """float32 [N, K] of a symmetric MatMulNBits (implicit zero point 2**(bits-1))."""
    attrs = {a.name: a.i for a in node.attribute}
    assert len(node.input) == 3  # no zero points: Q4_0 / Q8_0 are symmetric
    blob, scales = inits[node.input[1]], inits[node.input[2]]
    n, bits = attrs["N"], attrs["bits"]
    if bits == 4:
        codes = np.stack([blob & 0x0F, blob >> 4], axis=-1).reshape(n, -1)
    else:
        codes = blob.reshape(n, -1)
    codes = codes[:, :attrs["K"]].astype(np.float32) - (1 << (bits - 1))
    blocks = scales.reshape(n, -1).astype(np.float32)
    return codes * np.repeat(blocks, attrs["block_size"], axis=1)[:, :attrs["K"]]


def _expected(reference, initializer: str) -> np.ndarray:
    """transformers' dequantized weight(s) behind a MatMulNBits initializer: one
    Linear, the q/k/v the EP packed, or a half of Phi-3's fused gate_up_proj."""
    module = initializer.rsplit("_", 1)[0]  # e.g. model.layers.0.self_attn.qkv_proj
    state = {k: v.numpy() for k, v in reference.state_dict().items()}
    if f"{module}.weight" in state:
        return state[f"{module}.weight"]
    if module.endswith("qkv_proj"):
        return np.concatenate([state[f"{module.replace('qkv_proj', p)}.weight"]
                               for p in ("q_proj", "k_proj", "v_proj")])
    stem, part = module.rsplit(".", 1)
    fused = state[f"{stem}.gate_up_proj.weight"]
    half = fused.shape[0] // 2
    return fused[:half] if part == "gate_proj" else fused[half:]


def test_unknown_type_is_refused_by_name(gguf_file):
    from mobius.builder import build
    from mobius.errors import WeightsError

    path = gguf_file("llama-256", "F32", {"blk.0.ffn_down.weight": "IQ2_XS"})
    with pytest.raises(WeightsError, match=r"GGUF tensor blk\.0\.ffn_down\.weight has type "
                                           r"IQ2_XS, which mobius does not read; supported: "
                                           r"F32, F16, BF16, Q4_0"):
        build(path)


def test_cli_takes_a_gguf_file_and_a_folder_holding_one(gguf_file, tmp_path, capsys):
    from mobius.cli import main

    path = gguf_file("qwen2", "Q8_0")
    assert main(["build", "--quiet", "--model", path, str(tmp_path / "a")]) == 0
    assert main(["build", "--quiet", "--model", os.path.dirname(path), str(tmp_path / "b")]) == 0
    for out in ("a", "b"):
        assert os.path.getsize(tmp_path / out / "model.onnx.data") > 0
        assert (tmp_path / out / "tokenizer.json").is_file()
    two = tmp_path / "two"
    two.mkdir()
    for name in ("x.gguf", "y.gguf"):
        os.link(path, two / name)
    assert main(["build", "--quiet", "--model", str(two), str(tmp_path / "c")]) != 0
    assert "holds 2 GGUF files (x.gguf, y.gguf)" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_package_tokenizer_encodes_as_the_checkpoint(gguf_file, tmp_path):
    from tokenizers import Tokenizer

    from mobius.builder import build

    path = gguf_file("llama", "F32")
    out = build(path).save(str(tmp_path / "onnx"))
    original = Tokenizer.from_file(os.path.join(os.path.dirname(os.path.dirname(path)),
                                                "llama-hf", "tokenizer.json"))
    rebuilt = Tokenizer.from_file(f"{out}/tokenizer.json")
    text = "The quick brown fox</s> runs 0123456789 ONNX <s>models!"
    assert rebuilt.encode(text).ids == original.encode(text).ids
    assert rebuilt.decode(original.encode(text).ids) == original.decode(original.encode(text).ids)
    with open(f"{out}/tokenizer_config.json") as f:
        config = json.load(f)
    assert config["eos_token"] == "</s>" and config["bos_token"] == "<s>"
    assert "{% for m in messages %}" in config["chat_template"]


@pytest.mark.parametrize("sentencepiece", [False, True])
def test_package_tokenizer_encodes_as_transformers_gguf_tokenizer(gguf_file, tmp_path,
                                                                  sentencepiece):
    """Byte-level BPE ("gpt2") and SentencePiece BPE ("llama": scores, byte fallback,
    no merges stored) vocabularies, against transformers' GGUF tokenizer converter."""
    import transformers
    from tokenizers import Tokenizer

    from mobius.builder import build
    from testing.gguf_files import spm_tokenizer

    path = gguf_file("llama", "F32")
    if sentencepiece:
        hf = os.path.join(os.path.dirname(os.path.dirname(path)), "llama-hf")
        path = write_gguf(hf, str(tmp_path / "model.gguf"),
                          sentencepiece=spm_tokenizer(str(tmp_path / "spm.json")))
    out = build(path).save(str(tmp_path / "onnx"))
    rebuilt = Tokenizer.from_file(f"{out}/tokenizer.json")
    folder, name = os.path.split(path)
    reference = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    for text in ("The quick brown fox jumps", " leading  spaces\n tab\tend é ü 中文 🙂",
                 "ONNX</s> Runtime <s>runs models; 0123456789!"):
        ids = rebuilt.encode(text).ids
        assert ids == reference(text)["input_ids"], text
        assert (rebuilt.decode(ids, skip_special_tokens=True)
                == reference.decode(ids, skip_special_tokens=True))


def test_truncated_file_is_refused_before_any_graph(gguf_file, tmp_path):
    from mobius.builder import build
    from mobius.errors import WeightsError

    data = open(gguf_file("qwen2", "Q8_0"), "rb").read()
    (tmp_path / "cut.gguf").write_bytes(data[:-100])
    with pytest.raises(WeightsError, match="cut.gguf is not a readable GGUF file"):
        build(str(tmp_path / "cut.gguf"))
