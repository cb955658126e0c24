"""transformers' side of moe_families_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each variant's transformers-written checkpoint with transformers'
padded and unpadded runs (testing/checkpoint_runs.py).
"""

from __future__ import annotations

#: name: (tiny preset, config overrides); presets first, then routing/layout variants.
VARIANTS = {
    "mixtral": ("tiny-mixtral", {}),
    "mixtral_sliding_window": ("tiny-mixtral", {"sliding_window": 4}),
    "qwen3_moe": ("tiny-qwen3-moe", {}),  # norm_topk_prob False, layer 1 dense
    "qwen3_moe_normalized_sparse_step_2": (
        "tiny-qwen3-moe", {"norm_topk_prob": True, "decoder_sparse_step": 2,
                           "mlp_only_layers": [], "num_hidden_layers": 3,
                           "num_experts_per_tok": 3}),
    "qwen2_moe": ("tiny-qwen2-moe", {}),  # shared expert, norm_topk_prob True, top-3 of 5
}

CASES = sorted(VARIANTS)


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz, unpadded.npz."""
    from testing import checkpoint_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    preset, overrides = VARIANTS[case]
    checkpoint_runs.write(folder, lambda ckpt: make_hf_checkpoint(ckpt, preset, **overrides))
