"""transformers' side of llava_parity_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per case a checkpoint (ckpt/) and transformers' run on the test's
batch (seed0_pad3.npz, testing/vlm_reference.py); "default" adds the cpu test's batches
(seed 1: unpadded with STEPS steps, left-padded prefill only).
"""

from __future__ import annotations

import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_reference

STEPS, PAD = 3, 3
_QWEN2_TEXT = {k: v for k, v in TINY_PRESETS["tiny-qwen2"].items() if k != "architectures"}

#: name: tiny-llava overrides
OVERRIDES = {
    "default": {},  # vision_feature_layer -2 (the middle state of 2 layers), CLS dropped
    "full_last_layer": {"vision_feature_layer": -1, "vision_feature_select_strategy": "full"},
    "layer_list": {"vision_feature_layer": [0, -1]},  # two states concatenated: projector in = 96
    "qwen2_text_tied": {"text_config": _QWEN2_TEXT},  # QKV bias, tied embeddings via text_config
}
#: the cpu test's (seed, pad, decode steps) runs on the default checkpoint
CPU_RUNS = ((1, 0, STEPS), (1, PAD, 0))
CASES = sorted(OVERRIDES)



def write_case(case: str, folder: str) -> None:
    from testing.hf_checkpoints import load_hf_model
    from testing.llava_checkpoints import make_llava_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    make_llava_checkpoint(ckpt, **OVERRIDES[case])
    hf_model = load_hf_model(ckpt)
    runs = ((0, PAD, STEPS), *(CPU_RUNS if case == "default" else ()))
    for seed, pad, steps in runs:
        _record(hf_model, seed, pad, steps, vlm_reference.run_path(folder, seed, pad))


def _inputs(config, seed, pad) -> dict:
    """Two prompts with one image each (row 1 left-padded by ``pad`` <= 3) + their pixels."""
    vision = config.vision_config
    tokens = (vision.image_size // vision.patch_size) ** 2
    if config.vision_feature_select_strategy == "full":
        tokens += 1
    image = config.image_token_index
    rng = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in rng.integers(4, image, size=n)]  # noqa: E731
    row0 = text(2) + [image] * tokens + text(3)
    row1 = [0] * pad + text(1) + [image] * tokens + text(4 - pad)
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    pixel_values = rng.standard_normal((2, vision.num_channels, vision.image_size,
                                        vision.image_size)).astype(np.float32)
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "pixel_values": pixel_values}


def _record(hf_model, seed, pad, steps, path):
    import torch

    inputs = _inputs(hf_model.config, seed, pad)
    with torch.no_grad():
        features = torch.cat(list(hf_model.model.get_image_features(
            pixel_values=torch.from_numpy(inputs["pixel_values"])).pooler_output), dim=0)
    vlm_reference.record_image_run(hf_model, inputs, ("pixel_values",), features, steps, path)
