"""A fresh transformers checkpoint for presets_test (//rules:references.bzl): what
make_hf_checkpoint writes for a preset, seed 0 and no overrides (ckpt/), to compare with
the //testing/tiny:hf copy an hf_checkpoints() action built."""

from __future__ import annotations

import os

CASES = ["tiny-qwen3"]


def write_case(preset: str, folder: str) -> None:
    from testing.hf_checkpoints import make_hf_checkpoint

    make_hf_checkpoint(os.path.join(folder, "ckpt"), preset)
