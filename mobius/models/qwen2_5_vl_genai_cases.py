"""transformers' side of qwen2_5_vl_genai_test (the reference_cases rule runs it at build
time, //rules:references.bzl). Per family: the tiny checkpoint (ckpt/), per IMAGES case its
prompt and transformers' greedy tokens (prompts.npz, transformers.json with the config ids
the test checks), and transformers' Qwen2VLImageProcessor output for the test image
(processor.npz). "<family>_custom": a checkpoint whose preprocessor_config.json is
CUSTOM_PREPROCESSOR's (saved by transformers) and that processor's output (processor.npz).
"""

from __future__ import annotations

import json
import os

import numpy as np

from testing.qwen2_5_vl_checkpoints import GRID

NEW_TOKENS = 8
#: per case, the images' (t, h, w) grids in patches
IMAGES = {"text-only": [], "one-image": [GRID], "two-images-two-grids": [GRID, (1, 4, 6)]}

#: family: (tiny preset, transformers' image processor settings beyond the vision config's,
#: the test image's height and width). Qwen3-VL's image lies above min_pixels: scaling an
#: image up to it, genai's resize rounds down where transformers' rounds up (40 x 56
#: becomes 54 x 76 patches there, 56 x 76 in transformers).
#: Qwen3-VL's image processor settings, which Qwen 3.5 shares
QWEN3_PROCESSOR = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3, "min_pixels": 65536,
                   "max_pixels": 16777216}
FAMILIES = {
    "qwen2_5_vl": ("tiny-qwen2_5_vl", {}, (40, 56)),
    "qwen3_vl": ("tiny-qwen3_vl", QWEN3_PROCESSOR, (236, 330)),
    # Qwen 3.5 dense / MoE: the DeltaNet layers' states through genai's qwen3_5 pipeline
    "qwen3_5": ("tiny-qwen3_5_vl", QWEN3_PROCESSOR, (236, 330)),
    "qwen3_5_moe": ("tiny-qwen3_5_moe_vl", QWEN3_PROCESSOR, (236, 330)),
}
#: the families whose processor code differs: a custom preprocessor_config.json each
CUSTOM = ("qwen2_5_vl", "qwen3_vl")
#: a fine-tuned checkpoint's preprocessor_config.json: other pixel bounds (the 60 x 90
#: test image is scaled down to them) and mean/std than the family's defaults
CUSTOM_PREPROCESSOR = {"min_pixels": 1024, "max_pixels": 2304, "image_mean": [0.4, 0.5, 0.6],
                       "image_std": [0.2, 0.3, 0.25], "do_normalize": True}
CASES = [*sorted(FAMILIES), *(f"{family}_custom" for family in CUSTOM)]


def image_pixels(family: str | None) -> np.ndarray:
    """The family's test image (None: the custom preprocessor's), [h, w, 3] uint8."""
    seed, size = (4, (60, 90)) if family is None else (3, FAMILIES[family][2])
    return (np.random.default_rng(seed).random((*size, 3)) * 255).astype(np.uint8)


#: what processor.npz keeps of transformers' image processor output
PROCESSED = ("pixel_values", "image_grid_thw")

def write_case(case: str, folder: str) -> None:
    from testing import vlm_reference
    from testing.hf_checkpoints import load_hf_model
    from testing.qwen2_5_vl_checkpoints import make_qwen2_5_vl_checkpoint

    family = case.removesuffix("_custom")
    ckpt = make_qwen2_5_vl_checkpoint(os.path.join(folder, "ckpt"), preset=FAMILIES[family][0])
    with open(os.path.join(ckpt, "config.json")) as f:
        vision = json.load(f)["vision_config"]
    if case.endswith("_custom"):
        processor = _processor(vision, CUSTOM_PREPROCESSOR)
        processor.save_pretrained(ckpt)  # the checkpoint's preprocessor_config.json
        vlm_reference.save_processed(processor, image_pixels(None), folder, PROCESSED)
        return
    processor = _processor(vision, FAMILIES[family][1])
    vlm_reference.save_processed(processor, image_pixels(family), folder, PROCESSED)
    _generate(load_hf_model(ckpt), folder)


def _processor(vision: dict, settings: dict):
    import transformers

    return transformers.Qwen2VLImageProcessorPil(
        patch_size=vision["patch_size"], merge_size=vision["spatial_merge_size"],
        temporal_patch_size=vision["temporal_patch_size"], **settings)


def _generate(hf_model, folder):
    from testing.qwen2_5_vl_checkpoints import (hf_qwen_generate, image_span, image_tokens,
                                                make_pixels)

    config = hf_model.config
    arrays, tokens, per_image = {}, {}, {}
    for case, grids in IMAGES.items():
        rng = np.random.default_rng(0)
        low, high = 4, config.vision_start_token_id - 1
        ids = [int(t) for t in rng.integers(low, high, size=2)]
        for grid in grids:
            ids += image_span(config, grid) + [int(t) for t in rng.integers(low, high, size=3)]
        input_ids = np.array([ids], dtype=np.int64)
        pixels, grid_thw = make_pixels(config, grids, rng) if grids else (None, None)
        arrays[f"input_ids.{case}"] = input_ids
        if grids:
            arrays[f"pixel_values.{case}"], arrays[f"image_grid_thw.{case}"] = pixels, grid_thw
        tokens[case] = hf_qwen_generate(hf_model, input_ids, pixels, grid_thw, NEW_TOKENS)
        per_image[case] = [image_tokens(config, grid) for grid in grids]
    np.savez(os.path.join(folder, "prompts.npz"), **arrays)
    facts = {"tokens": tokens, "per_image": per_image, "image_token_id": config.image_token_id,
             "vision_start_token_id": config.vision_start_token_id,
             "spatial_merge_size": config.vision_config.spatial_merge_size}
    with open(os.path.join(folder, "transformers.json"), "w") as f:
        json.dump(facts, f)
