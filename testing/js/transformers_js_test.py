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

The checkpoints and transformers' outputs are written at build time
(testing/js/transformers_js_cases.py).
"""

import json
import os

import numpy as np
import pytest

from mobius.cli import main as mobius_main
from testing.js import transformers_js_cases
from testing.js.node import run_node
from testing.js.transformers_js_cases import (
    GENERATION_FAMILIES, NEW_TOKENS, PROMPT, SWA, SWA_PROMPT, SWA_WINDOW)
from testing.reference_cases import case_dir


def _case(family: str) -> tuple[str, dict]:
    """The family's checkpoint and transformers' generation on it."""
    folder = case_dir(transformers_js_cases, family)
    with open(os.path.join(folder, "reference.json")) as f:
        return os.path.join(folder, "ckpt"), json.load(f)


def _build(checkpoint: str, out: str, *extra: str) -> str:
    argv = ["build", "--model", checkpoint, out, "--ep", "webgpu", "--layout", "transformers.js",
            "--quiet", *extra]
    assert mobius_main(argv) == 0
    return out


@pytest.mark.parametrize("family", [
    pytest.param(name, marks=pytest.mark.shard_group(name)) for name in GENERATION_FAMILIES])
def test_text_generation_matches_transformers(tmp_path, family):
    checkpoint, reference = _case(family)
    folder = _build(checkpoint, str(tmp_path / "models" / family))
    got = run_node("transformers_runner.mjs", "generate", folder, str(tmp_path / "cache"),
                   PROMPT, str(NEW_TOKENS))
    tokens, text = reference["tokens"], reference["text"]
    assert len(set(tokens[-NEW_TOKENS:])) >= NEW_TOKENS // 2, tokens  # not a degenerate repeat
    assert got["tokens"] == tokens
    assert got["text"] == text


@pytest.mark.shard_group(SWA)
def test_sliding_window_generation_matches_transformers(tmp_path):
    """transformers.js numbers Gemma 3's positions from 1 (its position_ids are
    transformers' + 1); the package's window counts tokens from the attention mask,
    so the shifted positions move only RoPE, which attends by position differences."""
    checkpoint, reference = _case(SWA)
    assert len(reference["prompt_ids"]) > 2 * SWA_WINDOW  # the window slides in prefill
    folder = _build(checkpoint, str(tmp_path / "models" / SWA))
    got = run_node("transformers_runner.mjs", "generate", folder, str(tmp_path / "cache"),
                   SWA_PROMPT, str(NEW_TOKENS))
    tokens = reference["tokens"]
    assert len(set(tokens[-NEW_TOKENS:])) >= NEW_TOKENS // 2, tokens  # not a degenerate repeat
    assert got["tokens"] == tokens
    assert got["text"] == reference["text"]


def _onnxruntime_generation(ids: list[int], model_path: str) -> list[int]:
    """Prompt ``ids`` + NEW_TOKENS greedy tokens of ``model_path`` in Python onnxruntime."""
    import onnxruntime as ort

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
    pytest.param(name, marks=pytest.mark.shard_group(name)) for name in GENERATION_FAMILIES])
def test_q4_generation_matches_the_q4_graph_in_onnxruntime(tmp_path, family):
    checkpoint, reference = _case(family)
    folder = _build(checkpoint, str(tmp_path / "models" / family), "--quant", "int4")
    assert sorted(os.listdir(os.path.join(folder, "onnx"))) == ["model_q4.onnx",
                                                                "model_q4.onnx_data"]
    got = run_node("transformers_runner.mjs", "generate", folder, str(tmp_path / "cache"),
                   PROMPT, str(NEW_TOKENS))
    tokens = _onnxruntime_generation(reference["prompt_ids"],
                                     os.path.join(folder, "onnx", "model_q4.onnx"))
    assert len(set(tokens[-NEW_TOKENS:])) >= NEW_TOKENS // 2, tokens  # not a degenerate repeat
    assert got["tokens"] == tokens
    assert tokens != reference["tokens"]  # int4 is not f32: a real q4 model


@pytest.mark.shard_group("bert")
def test_feature_extraction_matches_transformers(tmp_path):
    case = case_dir(transformers_js_cases, "bert")
    folder = _build(os.path.join(case, "ckpt"), str(tmp_path / "models" / "bert"))
    got = run_node("transformers_runner.mjs", "feature-extraction", folder,
                   str(tmp_path / "cache"), json.dumps([PROMPT]))
    expected = np.load(os.path.join(case, "expected.npy"))
    assert got["dims"] == list(expected.shape)
    np.testing.assert_allclose(np.asarray(got["data"], np.float32).reshape(expected.shape),
                               expected, atol=1e-4)
