"""transformers' side of lfm3_vl_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a checkpoint and transformers' run on the Qwen-VL
harness's batch (testing/qwen_vl_parity.py: two prompts, one 6 x 10-patch image each, row
1 left-padded, 1-D positions); "default" also the cpu test's batches (seed 1, unpadded
and left-padded).
"""

from __future__ import annotations

from mobius.tiny.presets import TINY_PRESETS

PRESET = TINY_PRESETS["tiny-lfm3-vl"]
VISION = PRESET["vision_config"]


def _vision(**changes):
    return {"vision_config": {**VISION, **changes}}


#: name: tiny-lfm3-vl overrides (each changes the output where the default would not)
OVERRIDES = {
    "default": {},  # conv, conv, attention; GQA 2:1; kernel 3; 2 x 2 merge; gelu, biased
    "projector_relu": {"projector_hidden_act": "relu"},
    "projector_no_bias": {"projector_bias": False},
    "untied": {"tie_word_embeddings": False},
    "vision_layer_types": _vision(layer_types=["full_attention", "conv", "full_attention"]),
    "vision_kernel5_mha": _vision(conv_kernel_size=5, num_key_value_heads=2),
    "vision_merge1": _vision(spatial_merge_size=1),
    "vision_theta": _vision(rope_parameters={"rope_type": "axial", "rope_theta": 3.0}),
    "vision_eps": _vision(norm_eps=2.0),
}
#: the cpu test's (seed, pad) batches on the default checkpoint
CPU_RUNS = ((1, 0), (1, 3))
CASES = sorted(OVERRIDES)


def write_case(case: str, folder: str) -> None:
    from testing import qwen_vl_parity

    runs = ((0, qwen_vl_parity.PAD), *(CPU_RUNS if case == "default" else ()))
    qwen_vl_parity.write_case(folder, lambda ckpt: _make(ckpt, OVERRIDES[case]), runs)


def _make(folder: str, overrides: dict) -> None:
    """The Qwen-VL harness's checkpoint (sharper decoder attention), with the tower's and
    the projector's matrices scaled so that the image features are O(1) next to the text
    embeddings (transformers initializes them with std 0.02)."""
    import os

    import numpy as np
    from safetensors.numpy import load_file, save_file

    from testing.qwen2_5_vl_checkpoints import make_qwen2_5_vl_checkpoint

    make_qwen2_5_vl_checkpoint(folder, preset="tiny-lfm3-vl", **overrides)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for name, value in tensors.items():
        if value.ndim == 2 and "vision_tower." in name:
            tensors[name] = value * np.float32(3.0)
        elif value.ndim == 2 and "multi_modal_projector." in name:
            tensors[name] = value * np.float32(6.0)
    save_file(tensors, path, metadata={"format": "pt"})
