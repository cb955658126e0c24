"""transformers' side of routed_moe_families_test (the reference_cases rule runs it at build
time, //rules:references.bzl): each case's checkpoint (every parameter random, the all-zero
tensors randomized) with transformers' padded and unpadded runs (testing/checkpoint_runs.py).
"""

from __future__ import annotations

ERNIE = "tiny-ernie4_5_moe"
EXAONE = "tiny-exaone_moe"
GLM = "tiny-glm4_moe"
MINIMAX = "tiny-minimax_m2"

#: case: (preset, config overrides). ERNIE preset: biases, tied head, layer 0 dense,
#: layer 1 top-2 of 6 + one shared expert. GLM preset: q/k/v bias, qk norm, half RoPE,
#: layer 0 dense, layer 1 top-2 of 8 in 2 of 4 groups, renormalized, scaled 2.5. MiniMax
#: preset: every layer top-3 of 6, whole-projection q/k norms, RoPE on 8 of 16 (rotary_dim).
#: EXAONE preset: layers 0, 1 sliding (RoPE), 2 full (none); layer 0 dense, 1-2 top-2 of 8
#: in 2 of 4 groups, renormalized, scaled 2.5.
CONFIGS: dict[str, tuple[str, dict]] = {
    "ernie": (ERNIE, {}),
    # layers 0-2 sparse (start 0, end 2), 3 dense; untied, no bias, top-3, two shared
    "ernie_span_k3": (ERNIE, {"num_hidden_layers": 4, "moe_layer_start_index": 0,
                              "moe_layer_end_index": 2, "moe_k": 3, "moe_num_shared_experts": 2,
                              "use_bias": False, "tie_word_embeddings": False}),
    # layers 1 and 3 sparse, no shared expert; the top-2 probabilities sum below
    # moe_norm_min, so the weights are p / 0.6, not renormalized
    "ernie_interval_norm_min": (ERNIE, {"num_hidden_layers": 4, "moe_layer_start_index": 0,
                                        "moe_layer_interval": 2, "moe_num_shared_experts": 0,
                                        "moe_norm_min": 0.6}),
    "exaone_moe": (EXAONE, {}),
    # every layer sparse (mlp_layer_types over first_k_dense_replace 1), one group, top-3
    # unnormalized and unscaled, two shared experts, layer 1 alone sliding, tied head
    "exaone_moe_all_sparse": (EXAONE, {
        "mlp_layer_types": ["sparse"] * 3, "n_group": 1, "topk_group": 1,
        "num_experts_per_tok": 3, "norm_topk_prob": False, "routed_scaling_factor": 1.0,
        "num_shared_experts": 2, "tie_word_embeddings": True,
        "layer_types": ["full_attention", "sliding_attention", "full_attention"]}),
    "glm": (GLM, {}),
    # every layer sparse, one group, top-3 unnormalized and unscaled, two shared experts,
    # no bias / qk norm, full RoPE, tied head
    "glm_all_sparse": (GLM, {"num_hidden_layers": 3, "first_k_dense_replace": 0, "n_group": 1,
                             "topk_group": 1, "num_experts_per_tok": 3, "norm_topk_prob": False,
                             "routed_scaling_factor": 1.0, "n_shared_experts": 2,
                             "attention_bias": False, "use_qk_norm": False,
                             "partial_rotary_factor": 1.0, "tie_word_embeddings": True}),
    "minimax_m2": (MINIMAX, {}),
    # tied head, top-2, 32-wide heads rotating in full
    "minimax_m2_tied_top2_full_rotary": (MINIMAX, {"tie_word_embeddings": True,
                                                   "num_experts_per_tok": 2, "head_dim": 32,
                                                   "rotary_dim": 32}),
}

CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz, unpadded.npz."""
    from testing import checkpoint_runs
    from testing.hf_checkpoints import randomize_zero_tensors
    from testing.random_checkpoint import random_checkpoint

    preset, overrides = CONFIGS[case]
    checkpoint_runs.write(folder, lambda ckpt: randomize_zero_tensors(
        random_checkpoint(ckpt, preset, **overrides)))
