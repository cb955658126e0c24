"""transformers' side of gemma3n_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each checkpoint (every parameter random) with transformers' run
on a batch of an unpadded and a left-padded row (testing/checkpoint_runs.py).
"""

from __future__ import annotations

PRESET = "tiny-gemma3n"

#: checkpoint: config overrides of the preset (sliding, full, sliding, sliding, full; the
#: last two share K/V; 3 AltUp streams, stream 1 active; sparse gates on layers 0 and 1;
#: per-layer MLP widths; softcap 10; tied embeddings).
CONFIGS: dict[str, dict] = {
    "base": {},
    # no sharing, one MLP width, transformers' default sparsity (none below 11 layers), no
    # AltUp output scale; attention biases, an untied head, RoPE bases of the hub's keys
    # and linear scaling on full layers (transformers saves them as rope_parameters:
    # gemma3n_test spells them again)
    "plain": {
        "num_kv_shared_layers": 0, "intermediate_size": 150,
        "activation_sparsity_pattern": None, "altup_correct_scale": False,
        "altup_active_idx": 0, "attention_bias": True, "tie_word_embeddings": False,
        "rope_parameters": None, "rope_theta": 500000.0, "rope_local_base_freq": 20000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
}
CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz and unpadded.npz."""
    from testing import checkpoint_runs
    from testing.random_checkpoint import random_checkpoint

    checkpoint_runs.write(folder, lambda ckpt: random_checkpoint(ckpt, PRESET, **CONFIGS[case]))
