"""transformers' side of qwen3_next_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each checkpoint (every parameter random) with transformers'
run on a batch of an unpadded and a left-padded row (testing/checkpoint_runs.py).
"""

from __future__ import annotations

PRESET = "tiny-qwen3_next"

#: checkpoint: config overrides of the preset (DeltaNet x3 then gated attention; MoE with
#: a shared expert but on layer 1, renormalized top-2; 2 key heads serving 4 value heads).
CONFIGS: dict[str, dict] = {
    "moe": {},
    # dense MLPs everywhere, attention biases, attention every 2nd layer, one value head
    # per key head, half-rotary heads, tied embeddings
    "dense_biases_interval2": {"num_experts": 0, "attention_bias": True,
                               "full_attention_interval": 2, "linear_num_value_heads": 2,
                               "partial_rotary_factor": 0.5, "tie_word_embeddings": True},
    # experts on every 2nd layer (decoder_sparse_step 2, no mlp_only_layers), top-k weights
    # not renormalized, a conv kernel of 3
    "sparse_step2": {"decoder_sparse_step": 2, "mlp_only_layers": [], "norm_topk_prob": False,
                     "linear_conv_kernel_dim": 3},
}

CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    """ckpt/ and padded.npz."""
    from testing import checkpoint_runs
    from testing.random_checkpoint import random_checkpoint

    checkpoint_runs.write(folder, lambda ckpt: random_checkpoint(ckpt, PRESET, **CONFIGS[case]),
                          {"padded": checkpoint_runs.RUNS["padded"]})
