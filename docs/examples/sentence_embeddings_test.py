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

import transformers

import mobius
from mobius.models.bert import FAMILY as BERT
from mobius.models.mpnet import FAMILY as MPNET
from testing.encoder_runs import save_sentence_transformer
from testing.model_runs import make_family_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
SENTENCES = ["The quick brown fox jumps over the lazy dog.", "ONNX Runtime runs models.",
             "Once upon a time"]  # different lengths: the batch is padded


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


@pytest.fixture(scope="module", params=[BERT, MPNET], ids=lambda f: f.name)
def package(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"example-{request.param.name}")
    base = make_family_checkpoint(str(root / "ckpt"), request.param)
    st = save_sentence_transformer(base, str(root / "st"), ("mean",), normalize=True)
    return st, mobius.build(st).save(str(root / "pkg"))


def test_same_embeddings_as_sentence_transformers(package):
    from sentence_transformers import SentenceTransformer

    st, pkg = package
    outputs = _example().embed(pkg, SENTENCES)
    expected = SentenceTransformer(st, device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(outputs["sentence_embedding"], expected, atol=1e-5)
    lengths = {len(s.split()) for s in SENTENCES}
    assert len(lengths) > 1  # a padded batch


def test_same_hidden_states_as_the_transformers_pipeline(package):
    st, pkg = package
    outputs = _example().embed(pkg, SENTENCES)
    pipe = transformers.pipeline("feature-extraction", model=st, device="cpu")
    for i, sentence in enumerate(SENTENCES):
        expected = np.array(pipe(sentence))[0]  # [tokens, hidden], unpadded
        np.testing.assert_allclose(outputs["last_hidden_state"][i, :len(expected)], expected,
                                   atol=1e-4)


def test_command_line(package):
    _, pkg = package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, os.path.join(HERE, "sentence_embeddings.py"), pkg,
                             *SENTENCES], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("cosine(") == 3
