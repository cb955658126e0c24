"""transformers' side of ssm_families_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each state-space checkpoint (every parameter random) with
transformers' padded and unpadded runs (testing/checkpoint_runs.py).
"""

from __future__ import annotations

#: checkpoint: (preset, config overrides). tiny-mamba2: 3 layers of 8 heads of 16 in 2
#: groups, state 12, conv 4, chunks of 4 (the 10-token prefill spans 3, the last padded).
CONFIGS: dict[str, tuple[str, dict]] = {
    # tiny-mamba: 3 Mamba (v1) layers, intermediate 128, state 12, conv 4, time-step rank 5
    # (the 10-token prefill spans 2 of the scan's 8-position chunks)
    "mamba": ("tiny-mamba", {}),
    # projection biases, no conv bias, GELU after the conv, tied embeddings, expand 3,
    # conv 3, time-step rank "auto" (ceil(64 / 16) = 4), a large norm epsilon
    "mamba_biases_gelu": ("tiny-mamba", {
        "use_bias": True, "use_conv_bias": False, "hidden_act": "gelu",
        "tie_word_embeddings": True, "expand": 3, "conv_kernel": 3, "time_step_rank": "auto",
        "layer_norm_epsilon": 0.5}),
    "mamba2": ("tiny-mamba2", {}),
    # projection biases, no conv bias, one group, GELU after the conv, tied embeddings,
    # one chunk; dt clamped to [0.02, 0.05] in multi-token forwards, a large norm epsilon
    "mamba2_biases_limit_gelu": ("tiny-mamba2", {
        "use_bias": True, "use_conv_bias": False, "n_groups": 1, "hidden_act": "gelu",
        "tie_word_embeddings": True, "chunk_size": 256, "time_step_limit": [0.02, 0.05],
        "layer_norm_epsilon": 0.5}),
    # tiny-jamba: Mamba / attention / Mamba / Mamba / attention, MoE (2 of 4) at 0, 2, 4
    "jamba": ("tiny-jamba", {}),
    # Mamba projection biases, no conv bias, one expert per token, GELU (conv, MLP, experts),
    # time-step rank "auto" (4), tied embeddings, a large norm epsilon (every RMSNorm)
    "jamba_biases_gelu": ("tiny-jamba", {
        "mamba_proj_bias": True, "mamba_conv_bias": False, "num_experts_per_tok": 1,
        "hidden_act": "gelu", "mamba_dt_rank": "auto", "tie_word_embeddings": True,
        "rms_norm_eps": 0.5}),
    # tiny-nemotron_h: Mamba2 / MLP / attention / MLP / Mamba2, chunks of 4
    "nemotron_h": ("tiny-nemotron_h", {}),
    # attention first; every bias transformers reads, none on the conv; SiLU MLP, GELU after
    # the conv, one group, one chunk; dt >= 0.2 in the prefill (the
    # init-only time_step_max 0.01 puts the random dt_bias below it, so the clamp acts);
    # attention_bias and tie_word_embeddings, which transformers' Nemotron-H ignores
    "nemotron_h_biases_acts": ("tiny-nemotron_h", {
        "layers_block_type": ["full_attention", "linear_attention", "mlp", "linear_attention"],
        "use_bias": True, "use_conv_bias": False, "mlp_bias": True, "mlp_hidden_act": "silu",
        "mamba_hidden_act": "gelu", "n_groups": 1, "chunk_size": 256, "time_step_min": 0.2,
        "time_step_max": 0.01, "attention_bias": True, "tie_word_embeddings": True}),
    # tiny-falcon_h1: attention beside Mamba2 in 3 layers, every mup multiplier set, SiLU
    # gate without a norm
    "falcon_h1": ("tiny-falcon_h1", {}),
    # the gated RMSNorm after the gate (norm_before_gate: false), every bias, no conv bias,
    # one group, mamba_d_ssm null (expand x hidden), dt <= 0.5 in multi-token forwards, tied
    "falcon_h1_gated_norm_biases": ("tiny-falcon_h1", {
        "mamba_rms_norm": True, "mamba_norm_before_gate": False, "mamba_proj_bias": True,
        "projectors_bias": True, "attention_bias": True, "mlp_bias": True,
        "mamba_conv_bias": False, "mamba_n_groups": 1, "mamba_d_ssm": None, "mamba_expand": 2,
        "mamba_d_head": "auto", "time_step_limit": [0.0, 0.5], "tie_word_embeddings": True}),
    # the gated RMSNorm before the gate (transformers' default)
    "falcon_h1_norm_then_gate": ("tiny-falcon_h1", {"mamba_rms_norm": True}),
}

CASES = sorted(CONFIGS)


class _GenerateMask:
    """transformers' Mamba as its generate() calls it: no attention_mask after the prefill
    (MambaForCausalLM.prepare_inputs_for_generation; its mixer would broadcast the
    [batch, total] mask against one position)."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def __call__(self, input_ids, attention_mask, cache=None, **kwargs):
        first = cache is None
        return self.model(input_ids, attention_mask=attention_mask if first else None,
                          cache=cache, **kwargs)


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz, unpadded.npz."""
    import os

    from testing import checkpoint_runs
    from testing.hf_checkpoints import load_hf_model
    from testing.random_checkpoint import random_checkpoint

    preset, overrides = CONFIGS[case]
    if preset != "tiny-mamba":
        checkpoint_runs.write(folder, lambda ckpt: random_checkpoint(ckpt, preset, **overrides))
        return
    ckpt = random_checkpoint(os.path.join(folder, "ckpt"), preset, **overrides)
    checkpoint_runs.record(_GenerateMask(load_hf_model(ckpt)), folder)
