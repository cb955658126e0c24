"""transformers' side of lfm2_vl_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a checkpoint (ckpt/) and transformers' run on the
test's batch (seed0_pad3.npz, testing/vlm_reference.py); "default" adds the cpu test's
batches (seed 1: unpadded with STEPS steps, left-padded prefill only).
"""

from __future__ import annotations

import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_reference

STEPS, PAD = 3, 3
GRIDS = [(4, 6), (2, 4)]
VISION_KEYS = ("pixel_values", "pixel_attention_mask", "spatial_shapes")

_VISION = TINY_PRESETS["tiny-lfm2-vl"]["vision_config"]
#: name: tiny-lfm2-vl overrides (each changes the output where the default would not)
OVERRIDES = {
    "default": {},  # 2 x 2 unshuffle, layer norm, gelu, biased projector, tied head
    "factor1": {"downsample_factor": 1},
    "projector_relu": {"projector_hidden_act": "relu"},
    "projector_no_bias": {"projector_bias": False},
    "projector_no_layernorm": {"projector_use_layernorm": False},
    "untied": {"tie_word_embeddings": False},
    # a 3 x 3 position grid; the MAP head is saved and left unread
    "vision_grid3_head": {"vision_config": {**_VISION, "num_patches": 9,
                                            "vision_use_head": True}},
    "vision_relu": {"vision_config": {**_VISION, "hidden_act": "relu"}},
    "vision_eps": {"vision_config": {**_VISION, "layer_norm_eps": 1e-1}},
}
#: the cpu test's (seed, pad, decode steps) runs on the default checkpoint
CPU_RUNS = ((1, 0, STEPS), (1, PAD, 0))
CASES = sorted(OVERRIDES)



def write_case(case: str, folder: str) -> None:
    from testing.hf_checkpoints import load_hf_model
    from testing.lfm2_vl_checkpoints import make_lfm2_vl_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    make_lfm2_vl_checkpoint(ckpt, **OVERRIDES[case])
    hf_model = load_hf_model(ckpt)
    for seed, pad, steps in ((0, PAD, STEPS), *(CPU_RUNS if case == "default" else ())):
        _record(hf_model, seed, pad, steps, vlm_reference.run_path(folder, seed, pad))


def _inputs(config, seed, pad) -> dict:
    """Two prompts with one image each (row 1 left-padded by ``pad``), their patches and
    position ids (0 at the first real token)."""
    from testing.lfm2_vl_checkpoints import image_tokens, make_patches

    rng = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in rng.integers(4, config.image_token_id - 2, size=n)]  # noqa: E731
    factor = config.downsample_factor
    spans = [[config.image_token_id] * image_tokens(grid, factor) for grid in GRIDS]
    row0 = text(2) + spans[0] + text(3)
    row1 = [0] * pad + text(3) + spans[1] + text(len(row0) - pad - 3 - len(spans[1]))
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    positions = np.maximum(np.cumsum(attention_mask, axis=1) - 1, 0)
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": positions.astype(np.int64), **make_patches(config, GRIDS, rng)}


def _record(hf_model, seed, pad, steps, path):
    import torch

    inputs = _inputs(hf_model.config, seed, pad)
    with torch.no_grad():
        features = torch.cat(list(hf_model.model.get_image_features(
            **{k: torch.from_numpy(inputs[k]) for k in VISION_KEYS}).pooler_output))
    vlm_reference.record_image_run(hf_model, inputs, VISION_KEYS, features, steps, path)
