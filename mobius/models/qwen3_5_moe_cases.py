"""transformers' side of qwen3_5_moe_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each checkpoint (every parameter random) with transformers'
run on a batch of an unpadded and a left-padded row (testing/checkpoint_runs.py).
"""

from __future__ import annotations

PRESET = "tiny-qwen3_5_moe"

#: checkpoint: config overrides of the preset (DeltaNet x2, gated attention, DeltaNet;
#: 5 experts of 36, top 2, + a shared expert of 52 on every layer).
CONFIGS: dict[str, dict] = {
    "base": {},
    # top 3 of 5, attention every 2nd layer from full_attention_interval, attention
    # biases, one value head per key head, tied embeddings
    "top3_interval2": {"num_experts_per_tok": 3, "layer_types": None,
                       "full_attention_interval": 2, "attention_bias": True,
                       "linear_num_value_heads": 2, "tie_word_embeddings": True},
    # Qwen3-Next's MoE switches, which Qwen 3.5 MoE's config keeps but its model ignores
    # (every layer sparse, top-k always renormalized): they must not change anything
    "next_keys": {"norm_topk_prob": False, "mlp_only_layers": [1], "decoder_sparse_step": 2},
}

CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    """ckpt/ and padded.npz."""
    from testing import checkpoint_runs
    from testing.random_checkpoint import random_checkpoint

    checkpoint_runs.write(folder, lambda ckpt: random_checkpoint(ckpt, PRESET, **CONFIGS[case]),
                          {"padded": checkpoint_runs.RUNS["padded"]})
