"""transformers.js ``pipeline(task)`` runs ``mobius build --layout transformers.js`` encoder
folders unedited and returns what Python transformers' ``pipeline(task)`` returns on the
same tiny checkpoint: text-classification, token-classification and fill-mask on BERT,
image-classification and image-feature-extraction on ViT, zero-shot-image-classification
on CLIP. Labels (tokens, entities) must be equal and in the same order, scores within
SCORE_RTOL; the checkpoints and transformers' outputs are written at build time
(testing/js/transformers_js_task_cases.py). A q4 classifier (``--quant int4``:
``onnx/model_q4.onnx``) is another model, so its reference is the same file in
Python onnxruntime.
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
#: what each task's result is keyed by (its label), beside "score"
KEYS = {"text-classification": ("label",), "image-classification": ("label",),
        "zero-shot-image-classification": ("label",), "fill-mask": ("token",),
        "token-classification": ("entity", "index")}


def _run(case: str, tmp_path, *extra: str):
    """(transformers.js' pipeline output on the case's package, the case's folder)."""
    folder = case_dir(cases, case)
    out = str(tmp_path / "models" / case)
    assert mobius_main(["build", "--model", os.path.join(folder, "ckpt"), out, "--ep", "webgpu",
                        "--layout", "transformers.js", "--quiet", *extra]) == 0
    _, task, _, options = cases.CASES_SPEC[case]
    got = run_node("transformers_runner.mjs", task, out, str(tmp_path / "cache"),
                   json.dumps(cases.arguments(case, folder)), json.dumps(options))
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
def test_q4_text_classification_matches_the_q4_graph_in_onnxruntime(tmp_path):
    import onnxruntime as ort
    from tokenizers import Tokenizer

    got, folder = _run("bert-seq-cls", tmp_path, "--quant", "int4")
    out = tmp_path / "models" / "bert-seq-cls"
    assert sorted(os.listdir(out / "onnx")) == ["model_q4.onnx", "model_q4.onnx_data"]
    ids = np.array([Tokenizer.from_file(str(out / "tokenizer.json")).encode(cases.TEXT).ids])
    session = ort.InferenceSession(str(out / "onnx" / "model_q4.onnx"),
                                   providers=["CPUExecutionProvider"])
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
    assert max(abs(r["score"] - f32[r["label"]]) for r in got) > 1e-4  # a real q4 model


@pytest.mark.shard_group("vit")
def test_image_feature_extraction_matches_transformers(tmp_path):
    got, folder = _run("vit", tmp_path)
    expected = np.load(os.path.join(folder, "expected.npy"))
    assert got["dims"] == list(expected.shape)
    np.testing.assert_allclose(np.asarray(got["data"], np.float32).reshape(expected.shape),
                               expected, atol=1e-5)
