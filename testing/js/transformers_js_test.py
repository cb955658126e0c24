"""transformers.js runs ``mobius build --ep webgpu --layout transformers.js`` folders.

The folder is loaded as a local model with no edits. Greedy
``pipeline('text-generation')`` must produce the tokens and text of Python
transformers on the same tiny checkpoint; ``pipeline('feature-extraction')``
must give transformers' last hidden state for a BERT encoder.

q4 (``--quant int4``: ``onnx/model_q4.onnx``, which transformers.js picks from
config.json's dtype) computes something else than f32 transformers, so its
reference is the same q4 file run step by step in Python onnxruntime: greedy
prefill + one token per step, fed as transformers.js feeds it (int64 ids,
mask, positions, ``num_logits_to_keep`` 1). The tokens must be equal.
"""

import os

import numpy as np
import pytest

from mobius.cli import main as mobius_main
from testing import ep_suite
from testing.js.node import run_node
from testing.model_runs import make_family_checkpoint

PROMPT = "The quick brown fox jumps over"
NEW_TOKENS = 10
#: Weights this large make greedy decoding of a random model leave the prompt's
#: last token (tied-embedding Qwen3 and Gemma repeat it at the default 0.02).
INIT_RANGE = 0.5


def _checkpoint(tmp_path, family: str) -> str:
    from testing.hf_checkpoints import make_hf_checkpoint

    preset = ep_suite.family(family).tiny_preset
    return make_hf_checkpoint(str(tmp_path / "ckpt"), preset, initializer_range=INIT_RANGE)


def _build(checkpoint: str, out: str, *extra: str) -> str:
    argv = ["build", "--model", checkpoint, out, "--ep", "webgpu", "--layout", "transformers.js",
            "--quiet", *extra]
    assert mobius_main(argv) == 0
    return out


def _reference_generation(checkpoint: str) -> tuple[list[int], str]:
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    inputs = tokenizer(PROMPT, return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    generator = transformers.pipeline("text-generation", model=model, tokenizer=tokenizer)
    text = generator(PROMPT, max_new_tokens=NEW_TOKENS, do_sample=False,
                     return_full_text=False)[0]["generated_text"]
    return ids[0].tolist(), text


@pytest.mark.parametrize("family", [
    pytest.param(name, marks=pytest.mark.shard_group(name))
    for name in ("llama", "qwen3", "gemma", "phi3")])
def test_text_generation_matches_transformers(tmp_path, family):
    checkpoint = _checkpoint(tmp_path, family)
    folder = _build(checkpoint, str(tmp_path / "models" / family))
    got = run_node("transformers_runner.mjs", "generate", folder, str(tmp_path / "cache"),
                   PROMPT, str(NEW_TOKENS))
    tokens, text = _reference_generation(checkpoint)
    assert len(set(tokens[-NEW_TOKENS:])) >= NEW_TOKENS // 2, tokens  # not a degenerate repeat
    assert got["tokens"] == tokens
    assert got["text"] == text


def _onnxruntime_generation(checkpoint: str, model_path: str) -> list[int]:
    """Prompt + NEW_TOKENS greedy tokens of ``model_path`` in Python onnxruntime."""
    import onnxruntime as ort
    import transformers

    ids = transformers.AutoTokenizer.from_pretrained(checkpoint)(PROMPT)["input_ids"]
    session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    past = {name: np.zeros([1, i.shape[1], 0, i.shape[3]], np.float32)
            for name, i in inputs.items() if name.startswith("past_key_values.")}
    tokens, new = list(ids), list(ids)
    for _ in range(NEW_TOKENS):
        feeds = {"input_ids": np.array([new], np.int64),
                 "attention_mask": np.ones([1, len(tokens)], np.int64),
                 "position_ids": np.arange(len(tokens) - len(new), len(tokens))[None],
                 "num_logits_to_keep": np.array(1, np.int64), **past}
        names = [o.name for o in session.get_outputs()]
        out = dict(zip(names, session.run(None, {k: v for k, v in feeds.items() if k in inputs})))
        new = [int(out["logits"][0, -1].argmax())]
        tokens += new
        past = {name: out[name.replace("past_key_values", "present")] for name in past}
    return tokens


@pytest.mark.parametrize("family", [
    pytest.param(name, marks=pytest.mark.shard_group(name))
    for name in ("llama", "qwen3", "gemma", "phi3")])
def test_q4_generation_matches_the_q4_graph_in_onnxruntime(tmp_path, family):
    checkpoint = _checkpoint(tmp_path, family)
    folder = _build(checkpoint, str(tmp_path / "models" / family), "--quant", "int4")
    assert sorted(os.listdir(os.path.join(folder, "onnx"))) == ["model_q4.onnx",
                                                                "model_q4.onnx_data"]
    got = run_node("transformers_runner.mjs", "generate", folder, str(tmp_path / "cache"),
                   PROMPT, str(NEW_TOKENS))
    tokens = _onnxruntime_generation(checkpoint, os.path.join(folder, "onnx", "model_q4.onnx"))
    assert len(set(tokens[-NEW_TOKENS:])) >= NEW_TOKENS // 2, tokens  # not a degenerate repeat
    assert got["tokens"] == tokens
    assert tokens != _reference_generation(checkpoint)[0]  # int4 is not f32: a real q4 model


@pytest.mark.shard_group("bert")
def test_feature_extraction_matches_transformers(tmp_path):
    import torch
    import transformers

    checkpoint = make_family_checkpoint(str(tmp_path / "ckpt"), ep_suite.family("bert"))
    folder = _build(checkpoint, str(tmp_path / "models" / "bert"))
    got = run_node("transformers_runner.mjs", "embed", folder, str(tmp_path / "cache"), PROMPT)
    extractor = transformers.pipeline("feature-extraction", model=checkpoint,
                                      dtype=torch.float32)
    expected = np.asarray(extractor(PROMPT), np.float32)
    assert got["dims"] == list(expected.shape)
    np.testing.assert_allclose(np.asarray(got["data"], np.float32).reshape(expected.shape),
                               expected, atol=1e-4)
