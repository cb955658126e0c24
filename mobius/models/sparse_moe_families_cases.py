"""transformers' side of sparse_moe_families_test (the reference_cases rule runs it at build
time, //rules:references.bzl): each variant's checkpoint (transformers-written, all-zero
biases randomized) with transformers' padded and unpadded runs (testing/checkpoint_runs.py),
gpt-oss with large sinks and its unpadded run, and the checkpoints of the rejected switches.
"""

from __future__ import annotations

import os

#: name: (tiny preset, config overrides). Each switch the families read differs
#: from its preset value in one variant (presets: olmoe norm_topk_prob False;
#: granitemoe with all four multipliers set; phimoe with attention and lm_head
#: biases, router_jitter_noise 0.01).
VARIANTS = {
    "olmoe": ("tiny-olmoe", {}),
    "olmoe_norm_topk_prob": ("tiny-olmoe", {"norm_topk_prob": True, "num_experts_per_tok": 3}),
    "olmoe_attention_bias": ("tiny-olmoe", {"attention_bias": True}),
    "granitemoe": ("tiny-granitemoe", {}),
    "granitemoe_unit_multipliers_bias": (
        "tiny-granitemoe", {"embedding_multiplier": 1.0, "residual_multiplier": 1.0,
                            "attention_multiplier": 1.0, "logits_scaling": 1.0,
                            "attention_bias": True, "num_experts_per_tok": 3}),
    "phimoe": ("tiny-phimoe", {}),
    # router_jitter_noise is SparseMixer's threshold at inference (input_jitter_noise
    # is training-only); no biases; a sliding window shorter than the sequence.
    "phimoe_jitter_window_no_bias": (
        "tiny-phimoe", {"router_jitter_noise": 0.4, "input_jitter_noise": 0.5,
                        "attention_bias": False, "lm_head_bias": False, "sliding_window": 4}),
    "phimoe_longrope": (
        "tiny-phimoe", {"max_position_embeddings": 128, "rope_scaling": {
            "type": "longrope", "original_max_position_embeddings": 32, "short_mscale": 1.19,
            "long_mscale": 1.19, "short_factor": [1.0 + 0.05 * i for i in range(8)],
            "long_factor": [1.5 + 0.25 * i for i in range(8)]}}),
    "gpt_oss": ("tiny-gpt_oss", {}),  # switch cases: dense_families_test
}

#: name: (tiny preset, config overrides, message part): checkpoints mobius refuses to build.
REJECTED = {
    "olmoe_clip_qkv": ("tiny-olmoe", {"clip_qkv": 8.0}, "clip_qkv"),
    "phimoe_top3": ("tiny-phimoe", {"num_experts_per_tok": 3}, "exactly 2 experts"),
    "phimoe_longrope_mscale": (
        "tiny-phimoe", {"rope_scaling": {
            "type": "longrope", "original_max_position_embeddings": 64, "short_mscale": 1.1,
            "long_mscale": 1.3, "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}},
        "short_mscale"),
}

#: gpt-oss with attention sinks N(0, LARGE_SINKS) (the preset's are N(0, 0.02))
LARGE_SINKS = 2.0

CASES = [*sorted(VARIANTS), "gpt_oss_large_sinks", *sorted(REJECTED)]


def write_case(case: str, folder: str) -> None:
    """A variant: ckpt/, padded.npz, unpadded.npz. gpt_oss_large_sinks: ckpt/ (gpt_oss's
    with large sinks), unpadded.npz. A rejected case: ckpt/ only."""
    from testing import checkpoint_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    if case in REJECTED:
        preset, overrides, _ = REJECTED[case]
        make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, **overrides)
        return
    if case == "gpt_oss_large_sinks":
        checkpoint_runs.write(folder, lambda ckpt: _with_sinks(_variant(ckpt, "gpt_oss")),
                           {"unpadded": 0})
        return
    checkpoint_runs.write(folder, lambda ckpt: _variant(ckpt, case))


def _variant(folder: str, variant: str) -> str:
    from testing.hf_checkpoints import make_hf_checkpoint, randomize_zero_tensors

    preset, overrides = VARIANTS[variant]
    return randomize_zero_tensors(make_hf_checkpoint(folder, preset, **overrides))


def _with_sinks(folder: str) -> str:
    """Replaces ``folder``'s attention sinks by N(0, LARGE_SINKS) values."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(5)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for name in [n for n in tensors if n.endswith(".sinks")]:
        tensors[name] = (LARGE_SINKS * rng.standard_normal(tensors[name].shape)
                         ).astype(np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    return folder
