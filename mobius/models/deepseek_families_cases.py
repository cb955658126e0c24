"""transformers' side of deepseek_families_test (the reference_cases rule runs it at build
time, //rules:references.bzl): each checkpoint (every parameter random, V3's zero
e_score_correction_bias randomized) with transformers' padded run (testing/checkpoint_runs.py).
"""

from __future__ import annotations

V2, V3 = "tiny-deepseek-v2", "tiny-deepseek-v3"
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 0.8,
        "beta_fast": 32.0, "beta_slow": 1.0}

#: checkpoint: (preset, config overrides). Presets: V2 without q LoRA, greedy, scaling 1;
#: V3 with q LoRA, 2 of 4 groups kept, norm_topk_prob, scaling 2.5, interleaved RoPE.
CONFIGS: dict[str, tuple[str, dict]] = {
    "v2": (V2, {}),
    "v2_q_lora_all_moe": (V2, {"q_lora_rank": 36, "first_k_dense_replace": 0}),
    # one group of two experts kept: top-2 inside the best group, not the global top-2
    "v2_group_limited": (V2, {"topk_method": "group_limited_greedy", "topk_group": 1,
                              "routed_scaling_factor": 3.0}),
    # every bias tensor is random: an unread one fails the build, a misplaced one parity;
    # greedy routing scaled after the experts (fused MoE on cuda)
    "v2_biases_scaled": (V2, {"attention_bias": True, "mlp_bias": True,
                              "routed_scaling_factor": 3.0}),
    "v3": (V3, {}),
    "v3_no_q_lora_rope_half": (V3, {"q_lora_rank": None, "rope_interleave": False}),
    "v3_yarn": (V3, {"rope_parameters": YARN, "max_position_embeddings": 256}),
}

CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz (row 1 left-padded by 3, prefill + 3 decode steps)."""
    from testing import checkpoint_runs
    from testing.hf_checkpoints import randomize_zero_tensors
    from testing.random_checkpoint import random_checkpoint

    preset, overrides = CONFIGS[case]
    checkpoint_runs.write(folder, lambda ckpt: randomize_zero_tensors(
        random_checkpoint(ckpt, preset, **overrides)), {"padded": 3})
