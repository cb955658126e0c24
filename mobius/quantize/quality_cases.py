"""transformers' side of quality_test (the reference_cases rule runs it at build time,
//rules:references.bzl): the tiny-llama checkpoint the genai int4 check builds from.
"""

from __future__ import annotations

import os

#: transformers' default initializer_range (0.02) makes tiny models repeat one token
OVERRIDES = {"initializer_range": 0.2}
CASES = ["tiny-llama"]


def write_case(preset: str, folder: str) -> None:
    """ckpt/: the transformers-written checkpoint."""
    from testing.hf_checkpoints import make_hf_checkpoint

    make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, **OVERRIDES)
