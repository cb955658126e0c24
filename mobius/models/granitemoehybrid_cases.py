"""transformers' side of granitemoehybrid_test (the reference_cases rule runs it at build
time, //rules:references.bzl): each checkpoint (every parameter random) with transformers'
padded and unpadded runs (testing/checkpoint_runs.py).
"""

from __future__ import annotations

PRESET = "tiny-granitemoehybrid"
MAMBA, ATTN = "linear_attention", "full_attention"

#: checkpoint: config overrides of the preset (NoPE, MoE + shared MLP, 2 Mamba groups).
CONFIGS: dict[str, dict] = {
    "nope_moe": {},
    # RoPE, dense (no experts), every projection with a bias, 1 group, 3-position chunks
    # (the 10-token prefill spans 4 chunks, the last zero-padded)
    # (attention multiplier 0.25: RoPE visibly matters)
    "rope_dense_biases_chunked": {"position_embedding_type": "rope", "num_local_experts": 0,
                                  "attention_multiplier": 0.25,
                                  "attention_bias": True, "mamba_proj_bias": True,
                                  "mamba_n_groups": 1, "mamba_chunk_size": 3},
    # attention first, then two Mamba layers; tied embeddings, no conv bias
    "attention_first_tied": {"layer_types": [ATTN, MAMBA, MAMBA], "tie_word_embeddings": True,
                             "mamba_conv_bias": False, "position_embedding_type": "rope"},
}

CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz, unpadded.npz."""
    from testing import checkpoint_runs
    from testing.random_checkpoint import random_checkpoint

    checkpoint_runs.write(folder, lambda ckpt: random_checkpoint(ckpt, PRESET, **CONFIGS[case]))
