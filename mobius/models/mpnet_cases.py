"""transformers' side of mpnet_test (the reference_cases rule runs it at build time,
//rules:references.bzl): transformers' relative-position buckets, and checkpoints with
transformers' outputs on a sequence past the bias' max distance."""

from __future__ import annotations

import os

import numpy as np

from mobius.models import mpnet

#: key - query for the bucket comparison, past the max distance both ways
RELATIVE = np.arange(-400, 401)
#: long-sequence parity: bias table rows -> checkpoint (+ reference.npz at LONG_SEQ)
LONG_ROWS = [32, 40]
LONG_SEQ, LONG_PAD = 150, 40
#: "buckets": buckets.npy; "rows_<n>": ckpt/ (+ reference.npz for LONG_ROWS)
CASES = ["buckets", *(f"rows_{n}" for n in [*LONG_ROWS, 16])]


def write_case(case: str, folder: str) -> None:
    if case == "buckets":
        import torch
        from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

        buckets = MPNetEncoder.relative_position_bucket(torch.from_numpy(RELATIVE)).numpy()
        np.save(os.path.join(folder, "buckets.npy"), buckets)
        return
    from testing import encoder_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    rows = int(case.removeprefix("rows_"))
    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), mpnet.FAMILY.tiny_preset,
                                    relative_attention_num_buckets=rows)
    if rows in LONG_ROWS:
        encoder_runs.save(encoder_runs.record(checkpoint, seq=LONG_SEQ, pad=LONG_PAD),
                          os.path.join(folder, "reference.npz"))
