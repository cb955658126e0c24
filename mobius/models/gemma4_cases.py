"""transformers' side of gemma4_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each checkpoint (every parameter random, each layer's
layer_scalar buffer too) with transformers' run on a batch of an unpadded and a
left-padded row (testing/checkpoint_runs.py).
"""

from __future__ import annotations


PRESET = "tiny-gemma4"

#: checkpoint: config overrides of the preset (sliding, global, sliding, sliding, global;
#: the last two share K/V; global heads of 32 with one KV head, V = K's projection,
#: proportional RoPE on a quarter; per-layer inputs of 8; softcap 10; tied embeddings).
CONFIGS: dict[str, dict] = {
    "base": {},
    # no sharing, per-layer inputs or softcap; global layers with their own V projection,
    # both KV heads and a RoPE rotating half the pairs; attention biases, an untied head
    "plain": {
        "num_kv_shared_layers": 0, "attention_k_eq_v": False, "hidden_size_per_layer_input": 0,
        "final_logit_softcapping": None, "attention_bias": True, "tie_word_embeddings": False,
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 20000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.5,
                               "rope_theta": 500000.0}},
    },
}

#: the mixture-of-experts decoder (the 26B-A4B layout): on every layer, beside the dense
#: MLP, 5 experts of 40 (top 2) with router scales and per-expert scales random
MOE = {"enable_moe_block": True, "num_experts": 5, "top_k_experts": 2,
       "moe_intermediate_size": 40}
CONFIGS["moe"] = MOE
CASES = sorted(CONFIGS)


def _random_layer_scalars(ckpt: str) -> None:
    """Each layer's layer_scalar (a buffer transformers starts at 1) made random."""
    import os

    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(ckpt, "model.safetensors")
    tensors = load_file(path)
    generator = torch.Generator().manual_seed(5)
    for name in [n for n in tensors if n.endswith(".layer_scalar")]:
        tensors[name] = 1 + 0.3 * torch.randn(tensors[name].shape, generator=generator)
    save_file(tensors, path, metadata={"format": "pt"})


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz and unpadded.npz."""
    from testing import checkpoint_runs
    from testing.random_checkpoint import random_checkpoint

    def make(ckpt: str) -> str:
        random_checkpoint(ckpt, PRESET, **CONFIGS[case])
        _random_layer_scalars(ckpt)
        return ckpt

    checkpoint_runs.write(folder, make)
