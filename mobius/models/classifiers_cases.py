"""transformers' side of classifiers_test's cross-encoder case (the reference_cases rule runs
it at build time, //rules:references.bzl): a num_labels 1 checkpoint of the first
classifier family and transformers' outputs on it."""

from __future__ import annotations

import os

from mobius.models import classifiers

RERANKER = classifiers.FAMILIES[0]
RERANKER_LABELS = {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}
CASES = ["cross_encoder"]


def write_case(case: str, folder: str) -> None:
    """ckpt/ and reference.npz (testing/encoder_runs.record)."""
    from testing import encoder_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), RERANKER.tiny_preset,
                                    **RERANKER_LABELS)
    encoder_runs.save(encoder_runs.record(checkpoint), os.path.join(folder, "reference.npz"))
