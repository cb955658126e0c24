"""docs/examples/sentence_embeddings.py gives sentence-transformers' answer (encode) and
transformers' feature-extraction pipeline's, on tiny sentence-transformers checkpoints:
BERT, and MPNet as all-mpnet-base-v2 has it (mean pooling, Normalize)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import mobius
from docs import examples_cases as cases
from docs.examples_cases import TEXTS as SENTENCES
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))


def _example():
    sys.path.insert(0, HERE)  # as `python docs/examples/sentence_embeddings.py` has it
    try:
        spec = importlib.util.spec_from_file_location(
            "sentence_embeddings", os.path.join(HERE, "sentence_embeddings.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(HERE)


@pytest.fixture(scope="module", params=["tiny-bert", "tiny-mpnet"])
def package(request, tmp_path_factory):
    """(sentence-transformers' and the pipeline's recorded answers, the package of the
    sentence-transformers checkpoint: examples_cases._sentence_embeddings)."""
    recorded = case_dir(cases, f"sentence_embeddings__{request.param}")
    root = tmp_path_factory.mktemp(f"example-{request.param}")
    with np.load(os.path.join(recorded, "expected.npz")) as data:
        expected = {k: data[k] for k in data.files}
    return expected, mobius.build(os.path.join(recorded, "st")).save(str(root / "pkg"))


def test_same_embeddings_as_sentence_transformers(package):
    expected, pkg = package
    outputs = _example().embed(pkg, SENTENCES)
    np.testing.assert_allclose(outputs["sentence_embedding"], expected["embedding"], atol=1e-5)
    lengths = {len(s.split()) for s in SENTENCES}
    assert len(lengths) > 1  # a padded batch


def test_same_hidden_states_as_the_transformers_pipeline(package):
    recorded, pkg = package
    outputs = _example().embed(pkg, SENTENCES)
    for i in range(len(SENTENCES)):
        expected = recorded[f"hidden_{i}"]  # [tokens, hidden], unpadded
        np.testing.assert_allclose(outputs["last_hidden_state"][i, :len(expected)], expected,
                                   atol=1e-4)


def test_command_line(package):
    _, pkg = package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, os.path.join(HERE, "sentence_embeddings.py"), pkg,
                             *SENTENCES], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("cosine(") == 3
