"""transformers' side of qmoe_test (the reference_cases rule runs it at build time,
//rules:references.bzl): the transformers-written MoE checkpoints the test moves onto the
int4 grid.
"""

from __future__ import annotations

import os

#: case: (tiny preset, overrides)
CHECKPOINTS = {
    "qwen3_moe_normalized": ("tiny-qwen3-moe", dict(hidden_size=64, moe_intermediate_size=32,
                                                    norm_topk_prob=True)),
    "qwen3_moe_unnormalized": ("tiny-qwen3-moe", dict(hidden_size=64, moe_intermediate_size=32,
                                                      norm_topk_prob=False)),
    "gpt_oss": ("tiny-gpt_oss", {}),
}
CASES = sorted(CHECKPOINTS)


def write_case(case: str, folder: str) -> None:
    """ckpt/: the checkpoint."""
    from testing.hf_checkpoints import make_hf_checkpoint

    preset, overrides = CHECKPOINTS[case]
    make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, **overrides)
