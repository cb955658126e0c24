"""transformers' side of qwen3_5_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each checkpoint (every parameter random) with transformers'
run on a batch of an unpadded and a left-padded row (testing/checkpoint_runs.py).
"""

from __future__ import annotations

PRESET = "tiny-qwen3_5"

#: checkpoint: config overrides of the preset (DeltaNet x2, gated attention, DeltaNet;
#: 2 key heads serving 6 value heads; conv 4; M-RoPE sections [1, 1, 0] interleaved).
CONFIGS: dict[str, dict] = {
    "base": {},
    # attention every 2nd layer from full_attention_interval, attention biases, one value
    # head per key head, half-rotary heads whose M-RoPE sections are split another way
    # and not interleaved (text positions: the same RoPE), a conv kernel of 3, tied
    # embeddings
    "interval2_biases": {
        "layer_types": None, "full_attention_interval": 2, "attention_bias": True,
        "linear_num_value_heads": 2, "linear_conv_kernel_dim": 3, "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.5, "mrope_section": [2, 2, 0],
                            "mrope_interleaved": False}},
    # the base checkpoint plus a multi-token-prediction head, as released checkpoints ship
    "mtp": {},
}

CASES = sorted(CONFIGS)

#: mtp.* tensors of a one-layer MTP head (names as Qwen 3.5 checkpoints spell them)
MTP_TENSORS = ("mtp.fc.weight", "mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight",
               "mtp.pre_fc_norm_hidden.weight", "mtp.layers.0.input_layernorm.weight",
               "mtp.layers.0.mlp.down_proj.weight")


def _with_mtp(ckpt: str) -> None:
    """Adds random mtp.* tensors to the checkpoint (transformers does not load them)."""
    import os

    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(ckpt, "model.safetensors")
    tensors = load_file(path)
    hidden = tensors["model.norm.weight"].shape[0]
    generator = torch.Generator().manual_seed(3)
    for name in MTP_TENSORS:
        shape = (hidden, 2 * hidden) if name == "mtp.fc.weight" else (
            (hidden, 172) if "down_proj" in name else (hidden,))
        tensors[name] = torch.randn(shape, generator=generator)
    save_file(tensors, path, metadata={"format": "pt"})


def write_case(case: str, folder: str) -> None:
    """ckpt/ and padded.npz."""
    from testing import checkpoint_runs
    from testing.random_checkpoint import random_checkpoint

    def make(ckpt: str) -> str:
        random_checkpoint(ckpt, PRESET, **CONFIGS[case])
        if case == "mtp":
            _with_mtp(ckpt)
        return ckpt

    checkpoint_runs.write(folder, make, {"padded": checkpoint_runs.RUNS["padded"]})
