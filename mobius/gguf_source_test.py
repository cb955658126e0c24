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
import shutil

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from mobius import gguf_source_cases as cases
from mobius.gguf_source_cases import K_QUANTS, PAD, PRESETS, STEPS, TEXTS, UNKNOWN_TYPE
from testing import decoder_reference
from testing.model_runs import BuiltPackage, f32_parity
from testing.reference_cases import case_dir


def _case(preset: str, qtype: str, types: dict | None = None) -> str:
    return case_dir(cases, cases.case_name(preset, qtype, types))


def _gguf(case: str) -> str:
    return os.path.join(case, "gguf", "model.gguf")


def _reference(case: str):
    """transformers' run on the case's file (Gemma 1: on the checkpoint it was written from)."""
    return decoder_reference.load(os.path.join(case, "run.npz"))


def _session(path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _parity(case: str, tmp_path, **options):
    from mobius.builder import build

    package = build(_gguf(case), execution_provider="cpu", prefill_logits="all", **options)
    out = package.save(str(tmp_path / "onnx"))
    run = f32_parity(BuiltPackage(out, package.config, "f32"), _reference(case),
                     session=_session(f"{out}/model.onnx"), pad=PAD, steps=STEPS)
    _check_finite(run)
    return out, run


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
    ("llama-256", "F32", K_QUANTS),
])
def test_float_build_matches_transformers_gguf_loading(tmp_path, preset, qtype, types):
    _, run = _parity(_case(preset, qtype, types), tmp_path)
    assert run.max_abs_diff <= 1e-4, run.max_abs_diff


@pytest.mark.parametrize("preset, qtype, quant", [
    ("llama", "Q4_0", "int4"), ("llama", "Q8_0", "int8"), ("qwen2", "Q4_0", "int4"),
    ("phi3", "Q4_0", "int4"), ("gemma2", "Q4_0", "int4"), ("gemma3", "Q8_0", "int8"),
])
def test_q4_0_and_q8_0_are_carried_into_matmulnbits(tmp_path, caplog, preset, qtype, quant):
    # the token table and the head are read as floats (requantized if quantized): kept float
    case = _case(preset, qtype)
    with caplog.at_level(logging.WARNING, "mobius.quantize.prequantized"):
        out, run = _parity(case, tmp_path, quant=quant, quant_accuracy_level=1,
                           quant_lm_head=False, quant_embedding=False)
    assert not caplog.records, [r.message for r in caplog.records]  # nothing requantized
    scale = max(float(np.abs(step).max()) for step in run.hf_steps)
    assert run.max_abs_diff <= 1e-5 * scale, (run.max_abs_diff, scale)
    model = onnx.load(f"{out}/model.onnx")
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    layers = PRESETS[preset][1].get("num_hidden_layers", 2)
    linears = sum(3 if "qkv_proj" in n.input[1] else 1 for n in nodes)  # packed q/k/v: 3
    assert linears == layers * 7  # q, k, v, o, gate, up, down: every one carried
    with np.load(os.path.join(case, "weights.npz")) as weights:
        state = dict(weights)
    for node in nodes:
        got = _dequantized(node, inits)
        np.testing.assert_array_equal(got, _expected(state, node.input[1]))


def test_carried_q4_0_at_the_cpu_default_accuracy_level(tmp_path):
    """The CPU EP's default form (accuracy level 4: activations quantized to int8 per
    block) stays within 2 % of the logit scale (measured: 0.7 %); a wrong block, scale
    or row order is off by the whole scale."""
    import onnxruntime as ort

    from mobius.builder import build

    case = _case("llama", "Q4_0")
    package = build(_gguf(case), execution_provider="cpu", prefill_logits="all", quant="int4")
    out = package.save(str(tmp_path / "onnx"))
    session = ort.InferenceSession(f"{out}/model.onnx", providers=["CPUExecutionProvider"])
    run = f32_parity(BuiltPackage(out, package.config, "f32"), _reference(case),
                     session=session, pad=PAD, steps=STEPS)
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


def _expected(state: dict[str, np.ndarray], initializer: str) -> np.ndarray:
    """transformers' dequantized weight(s) (its state dict) behind a MatMulNBits initializer:
    one Linear, the q/k/v the EP packed, or a half of Phi-3's fused gate_up_proj."""
    module = initializer.rsplit("_", 1)[0]  # e.g. model.layers.0.self_attn.qkv_proj
    if f"{module}.weight" in state:
        return state[f"{module}.weight"]
    if module.endswith("qkv_proj"):
        return np.concatenate([state[f"{module.replace('qkv_proj', p)}.weight"]
                               for p in ("q_proj", "k_proj", "v_proj")])
    stem, part = module.rsplit(".", 1)
    fused = state[f"{stem}.gate_up_proj.weight"]
    half = fused.shape[0] // 2
    return fused[:half] if part == "gate_proj" else fused[half:]


def test_unknown_type_is_refused_by_name():
    from mobius.builder import build
    from mobius.errors import WeightsError

    path = _gguf(_case("llama-256", "F32", UNKNOWN_TYPE))
    with pytest.raises(WeightsError, match=r"GGUF tensor blk\.0\.ffn_down\.weight has type "
                                           r"IQ2_XS, which mobius does not read; supported: "
                                           r"F32, F16, BF16, Q4_0"):
        build(path)


def test_cli_takes_a_gguf_file_and_a_folder_holding_one(tmp_path, capsys):
    from mobius.cli import main

    path = _gguf(_case("qwen2", "Q8_0"))
    assert main(["build", "--quiet", "--model", path, str(tmp_path / "a")]) == 0
    assert main(["build", "--quiet", "--model", os.path.dirname(path), str(tmp_path / "b")]) == 0
    for out in ("a", "b"):
        assert os.path.getsize(tmp_path / out / "model.onnx.data") > 0
        assert (tmp_path / out / "tokenizer.json").is_file()
    two = tmp_path / "two"
    two.mkdir()
    for name in ("x.gguf", "y.gguf"):
        shutil.copyfile(path, two / name)
    assert main(["build", "--quiet", "--model", str(two), str(tmp_path / "c")]) != 0
    assert "holds 2 GGUF files (x.gguf, y.gguf)" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_package_tokenizer_encodes_as_the_checkpoint(tmp_path):
    from tokenizers import Tokenizer

    from mobius.builder import build

    case = _case("llama", "F32")
    out = build(_gguf(case)).save(str(tmp_path / "onnx"))
    original = Tokenizer.from_file(os.path.join(case, "checkpoint_tokenizer.json"))
    rebuilt = Tokenizer.from_file(f"{out}/tokenizer.json")
    text = "The quick brown fox</s> runs 0123456789 ONNX <s>models!"
    assert rebuilt.encode(text).ids == original.encode(text).ids
    assert rebuilt.decode(original.encode(text).ids) == original.decode(original.encode(text).ids)
    with open(f"{out}/tokenizer_config.json") as f:
        config = json.load(f)
    assert config["eos_token"] == "</s>" and config["bos_token"] == "<s>"
    assert "{% for m in messages %}" in config["chat_template"]


@pytest.mark.parametrize("sentencepiece", [False, True])
def test_package_tokenizer_encodes_as_transformers_gguf_tokenizer(tmp_path, sentencepiece):
    """Byte-level BPE ("gpt2") and SentencePiece BPE ("llama": scores, byte fallback,
    no merges stored) vocabularies, against transformers' GGUF tokenizer converter."""
    from tokenizers import Tokenizer

    from mobius.builder import build

    case = case_dir(cases, cases.SENTENCEPIECE) if sentencepiece else _case("llama", "F32")
    out = build(_gguf(case)).save(str(tmp_path / "onnx"))
    rebuilt = Tokenizer.from_file(f"{out}/tokenizer.json")
    with open(os.path.join(case, "tokens.json")) as f:
        reference = json.load(f)
    for text, expected, decoded in zip(TEXTS, reference["ids"], reference["decoded"],
                                       strict=True):
        ids = rebuilt.encode(text).ids
        assert ids == expected, text
        assert rebuilt.decode(ids, skip_special_tokens=True) == decoded


def test_truncated_file_is_refused_before_any_graph(tmp_path):
    from mobius.builder import build
    from mobius.errors import WeightsError

    data = open(_gguf(_case("qwen2", "Q8_0")), "rb").read()
    (tmp_path / "cut.gguf").write_bytes(data[:-100])
    with pytest.raises(WeightsError, match="cut.gguf is not a readable GGUF file"):
        build(str(tmp_path / "cut.gguf"))
