"""transformers.js ``pipeline(task)`` runs ``mobius build --layout transformers.js`` encoder
folders unedited and returns what Python transformers' ``pipeline(task)`` returns on the
same tiny checkpoint: text-classification, token-classification and fill-mask on BERT,
image-classification and image-feature-extraction on ViT, zero-shot-image-classification
on CLIP. Labels (tokens, entities) must be equal and in the same order, scores within
SCORE_RTOL; the checkpoints and transformers' outputs are written at build time
(testing/js/transformers_js_task_cases.py). A q4 / q8 classifier (``--quant int4``:
``onnx/model_q4.onnx``; ``--quant int8``: ``onnx/model_quantized.onnx``), loaded with
pipeline()'s ``dtype``, is another model, so its reference is the same file in Python
onnxruntime; q8's scores are also within Q8_ATOL of the float model's.
"""

import json
import os

import numpy as np
import pytest

from mobius.cli import main as mobius_main
from testing.js import transformers_js_task_cases as cases
from testing.js.node import run_node
from testing.reference_cases import case_dir

#: f32 graph vs f32 torch, softmax scores (image cases: the same PNG decoded by sharp / PIL)
SCORE_RTOL, SCORE_ATOL = 1e-5, 1e-7
#: q8 (--quant int8: 8-bit block weights, f32 activations) vs f32 torch, softmax scores
#: (measured 8.5e-3 on bert-seq-cls, whose scores reach 0.8; q4: 8.5e-2)
Q8_ATOL = 2e-2
#: what each task's result is keyed by (its label), beside "score"
KEYS = {"text-classification": ("label",), "image-classification": ("label",),
        "zero-shot-image-classification": ("label",), "fill-mask": ("token",),
        "token-classification": ("entity", "index")}


def _run(case: str, tmp_path, *extra: str, dtype: str | None = None):
    """(transformers.js' pipeline output on the case's package, the case's folder);
    ``dtype``: pipeline()'s (q4, q8)."""
    folder = case_dir(cases, case)
    out = str(tmp_path / "models" / case)
    assert mobius_main(["build", "--model", os.path.join(folder, "ckpt"), out, "--ep", "webgpu",
                        "--layout", "transformers.js", "--quiet", *extra]) == 0
    _, task, _, options = cases.CASES_SPEC[case]
    got = run_node("transformers_runner.mjs", task, out, str(tmp_path / "cache"),
                   json.dumps(cases.arguments(case, folder)),
                   json.dumps({**options, **({"dtype": dtype} if dtype else {})}))
    return got, folder


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.shard_group(c)) for c in cases.CASES if c != "vit"])
def test_pipeline_matches_transformers(tmp_path, case):
    got, folder = _run(case, tmp_path)
    task = cases.CASES_SPEC[case][1]
    with open(os.path.join(folder, "expected.json")) as f:
        expected = json.load(f)
    keys = KEYS[task]
    assert [[r[k] for k in keys] for r in got] == [[r[k] for k in keys] for r in expected]
    scores = [r["score"] for r in expected]
    np.testing.assert_allclose([r["score"] for r in got], scores, rtol=SCORE_RTOL,
                               atol=SCORE_ATOL)
    assert max(scores) > 1.1 * min(scores), scores  # the labels are told apart


@pytest.mark.shard_group("bert-seq-cls")
@pytest.mark.parametrize("quant,js_dtype,file,f32_atol", [
    ("int4", "q4", "model_q4.onnx", None), ("int8", "q8", "model_quantized.onnx", Q8_ATOL)])
def test_quantized_text_classification_matches_its_graph_in_onnxruntime(
        tmp_path, quant, js_dtype, file, f32_atol):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    got, folder = _run("bert-seq-cls", tmp_path, "--quant", quant, dtype=js_dtype)
    out = tmp_path / "models" / "bert-seq-cls"
    assert sorted(os.listdir(out / "onnx")) == [file, file + "_data"]
    ids = np.array([Tokenizer.from_file(str(out / "tokenizer.json")).encode(cases.TEXT).ids])
    session = ort.InferenceSession(str(out / "onnx" / file), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             "token_type_ids": np.zeros_like(ids)}
    names = {i.name for i in session.get_inputs()}
    (logits,) = session.run(["logits"], {k: v for k, v in feeds.items() if k in names})
    probs = np.exp(logits[0] - logits[0].max())
    probs /= probs.sum()
    order = np.argsort(-probs)
    with open(out / "config.json") as f:
        labels = json.load(f)["id2label"]
    assert [r["label"] for r in got] == [labels[str(i)] for i in order]
    np.testing.assert_allclose([r["score"] for r in got], probs[order], rtol=SCORE_RTOL,
                               atol=SCORE_ATOL)
    with open(os.path.join(folder, "expected.json")) as f:
        f32 = {r["label"]: r["score"] for r in json.load(f)}
    off = max(abs(r["score"] - f32[r["label"]]) for r in got)
    assert off > 1e-5  # a real quantized model: not the float file
    if f32_atol is not None:  # 8-bit weights: the float model's scores, nearly
        assert off < f32_atol, off


@pytest.mark.shard_group("vit")
def test_image_feature_extraction_matches_transformers(tmp_path):
    got, folder = _run("vit", tmp_path)
    expected = np.load(os.path.join(folder, "expected.npy"))
    assert got["dims"] == list(expected.shape)
    np.testing.assert_allclose(np.asarray(got["data"], np.float32).reshape(expected.shape),
                               expected, atol=1e-5)
