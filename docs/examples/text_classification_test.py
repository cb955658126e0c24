"""docs/examples/text_classification.py gives transformers' pipeline answers on tiny
sequence- and token-classification checkpoints (labels from the package metadata)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import transformers

import mobius
from mobius.models.classifiers import FAMILIES
from testing.model_runs import make_family_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = ["The quick brown fox jumps over the lazy dog.", "ONNX Runtime runs models.",
         "Once upon a time"]  # different lengths: the batch is padded
BY_NAME = {f.name: f for f in FAMILIES}


def _example():
    sys.path.insert(0, HERE)  # as `python docs/examples/text_classification.py` has it
    try:
        spec = importlib.util.spec_from_file_location(
            "text_classification", os.path.join(HERE, "text_classification.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(HERE)


def _package(tmp_path, family_name, **overrides):
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), BY_NAME[family_name], **overrides)
    return folder, mobius.build(folder).save(str(tmp_path / "pkg"))


@pytest.mark.parametrize("family", ["distilbert-seq-cls", "bert-seq-cls"])
def test_same_labels_and_scores_as_the_pipeline(family, tmp_path):
    folder, pkg = _package(tmp_path, family)
    probabilities, labels, _ = _example().classify(pkg, TEXTS)
    pipe = transformers.pipeline("text-classification", model=folder, device="cpu")
    for i, expected in enumerate(pipe(TEXTS)):
        best = int(probabilities[i].argmax())
        assert labels[best] == expected["label"]
        np.testing.assert_allclose(probabilities[i, best], expected["score"], atol=1e-5)


def test_reranker_score_is_the_pipelines_sigmoid(tmp_path):
    folder, pkg = _package(tmp_path, "bert-seq-cls", id2label={"0": "LABEL_0"},
                           label2id={"LABEL_0": 0})
    probabilities, _, _ = _example().classify(pkg, TEXTS)
    pipe = transformers.pipeline("text-classification", model=folder, device="cpu")
    expected = [r["score"] for r in pipe(TEXTS)]
    np.testing.assert_allclose(probabilities[:, 0], expected, atol=1e-5)


def test_same_token_labels_as_the_pipeline(tmp_path):
    folder, pkg = _package(tmp_path, "roberta-tok-cls")
    probabilities, labels, feeds = _example().classify(pkg, TEXTS)
    pipe = transformers.pipeline("token-classification", model=folder, device="cpu",
                                 ignore_labels=[])
    for i, tokens in enumerate(pipe(TEXTS)):
        real = probabilities[i][feeds["attention_mask"][i].astype(bool)]
        assert len(tokens) == len(real)
        for token in tokens:
            row = real[token["index"]]
            assert labels[int(row.argmax())] == token["entity"]
            np.testing.assert_allclose(row.max(), token["score"], atol=1e-5)


def test_command_line(tmp_path):
    _, pkg = _package(tmp_path, "distilbert-seq-cls")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, os.path.join(HERE, "text_classification.py"), pkg,
                             *TEXTS], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(TEXTS)
    assert all(any(label in line for label in ("NEGATIVE", "NEUTRAL", "POSITIVE"))
               for line in result.stdout.splitlines())
