"""docs/examples/text_classification.py gives transformers' pipeline answers on tiny
sequence- and token-classification checkpoints (labels from the package metadata)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mobius
from docs import examples_cases as cases
from docs.examples_cases import TEXTS
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))


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


def _package(tmp_path, case: str):
    """(transformers' recorded pipeline answers, the package of the case's checkpoint):
    examples_cases."""
    recorded = case_dir(cases, f"text_classification__{case}")
    with open(os.path.join(recorded, "expected.json")) as f:
        expected = json.load(f)
    return expected, mobius.build(os.path.join(recorded, "ckpt")).save(str(tmp_path / "pkg"))


@pytest.mark.parametrize("family", ["distilbert-seq-cls", "bert-seq-cls"])
def test_same_labels_and_scores_as_the_pipeline(family, tmp_path):
    answers, pkg = _package(tmp_path, family)
    probabilities, labels, _ = _example().classify(pkg, TEXTS)
    for i, expected in enumerate(answers):
        best = int(probabilities[i].argmax())
        assert labels[best] == expected["label"]
        np.testing.assert_allclose(probabilities[i, best], expected["score"], atol=1e-5)
    assert len(answers) == len(TEXTS)


def test_reranker_score_is_the_pipelines_sigmoid(tmp_path):
    answers, pkg = _package(tmp_path, "reranker")
    probabilities, _, _ = _example().classify(pkg, TEXTS)
    np.testing.assert_allclose(probabilities[:, 0], [r["score"] for r in answers], atol=1e-5)


def test_same_token_labels_as_the_pipeline(tmp_path):
    answers, pkg = _package(tmp_path, "roberta-tok-cls")
    probabilities, labels, feeds = _example().classify(pkg, TEXTS)
    for i, tokens in enumerate(answers):
        real = probabilities[i][feeds["attention_mask"][i].astype(bool)]
        assert len(tokens) == len(real)
        for token in tokens:
            row = real[token["index"]]
            assert labels[int(row.argmax())] == token["entity"]
            np.testing.assert_allclose(row.max(), token["score"], atol=1e-5)
    assert len(answers) == len(TEXTS)


def test_command_line(tmp_path):
    _, pkg = _package(tmp_path, "distilbert-seq-cls")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, os.path.join(HERE, "text_classification.py"), pkg,
                             *TEXTS], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(TEXTS)
    assert all(any(label in line for label in ("NEGATIVE", "NEUTRAL", "POSITIVE"))
               for line in result.stdout.splitlines())
