"""transformers' side of encoder_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): transformers' outputs on each encoder family's seed-0
checkpoint, and sentence-transformers pipelines around the embedders' with their outputs.
"""

from __future__ import annotations

import os
import tempfile

from mobius.models.registry import FAMILIES
from mobius.tasks import encoder

ENCODERS = [f for f in FAMILIES if f.task.reference.runner == "single_pass"]
#: the families whose task reads sentence-transformers' pooling
EMBEDDERS = [f for f in ENCODERS if f.task is encoder.TASK]
#: sentence-transformers pipelines: (pooling modes, Normalize)
POOLINGS = {
    "mean_normalized": (("mean",), True),
    "cls": (("cls",), False),
    "lasttoken": (("lasttoken",), False),
    "max_cls_sqrt_normalized": (("max", "cls", "mean_sqrt_len_tokens"), True),
}
#: "<family>": reference.npz of the seed-0 checkpoint (hf_checkpoints.seed0_checkpoint);
#: "<family>__<pooling>": st/ (the pipeline) and its reference.npz
CASES = [f.name for f in ENCODERS] + [f"{f.name}__{p}" for f in EMBEDDERS
                                      for p in sorted(POOLINGS)]


def write_case(case: str, folder: str) -> None:
    from testing import encoder_runs
    from testing.hf_checkpoints import seed0_checkpoint

    name, _, pooling = case.partition("__")
    family = next(f for f in ENCODERS if f.name == name)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = seed0_checkpoint(os.path.join(tmp, "ckpt"), family.tiny_preset)
        if pooling:
            modes, normalize = POOLINGS[pooling]
            checkpoint = encoder_runs.save_sentence_transformer(
                checkpoint, os.path.join(folder, "st"), modes, normalize)
        encoder_runs.save(encoder_runs.record(checkpoint), os.path.join(folder, "reference.npz"))
