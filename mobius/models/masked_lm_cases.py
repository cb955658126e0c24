"""transformers' side of masked_lm_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per fill-mask family, an untied checkpoint and transformers'
outputs on it."""

from __future__ import annotations

import os

from mobius.models import masked_lm

CASES = [f.name for f in masked_lm.FAMILIES]


def write_case(case: str, folder: str) -> None:
    """ckpt/ (tie_word_embeddings False) and reference.npz (testing/encoder_runs.record)."""
    from testing import encoder_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    family = next(f for f in masked_lm.FAMILIES if f.name == case)
    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), family.tiny_preset,
                                    tie_word_embeddings=False)
    encoder_runs.save(encoder_runs.record(checkpoint), os.path.join(folder, "reference.npz"))
