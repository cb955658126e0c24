"""Tiny LFM2-VL checkpoints and image inputs: transformers' random model (every
parameter random) from the tiny-lfm2-vl preset, and patch tensors in the layout
Lfm2VlImageProcessor (and onnxruntime-genai's lfm2_vl processor) hand the model."""

from __future__ import annotations

import numpy as np

from testing.hf_checkpoints import make_hf_checkpoint


def make_lfm2_vl_checkpoint(folder: str, seed: int = 0, **overrides) -> str:
    return make_hf_checkpoint(folder, "tiny-lfm2-vl", seed=seed, **overrides)


def image_tokens(grid: tuple[int, int], factor: int) -> int:
    """The image tokens of a rows x columns patch grid: one per factor x factor block."""
    return (grid[0] // factor) * (grid[1] // factor)


def make_patches(config, grids: list[tuple[int, int]], rng) -> dict[str, np.ndarray]:
    """pixel_values [images, max patches, C * p^2] (random, padding zero),
    pixel_attention_mask [images, max patches] and spatial_shapes [images, 2]."""
    vision = config.vision_config
    width = vision.num_channels * vision.patch_size**2
    most = max(rows * cols for rows, cols in grids)
    pixels = np.zeros((len(grids), most, width), np.float32)
    mask = np.zeros((len(grids), most), np.int64)
    for i, (rows, cols) in enumerate(grids):
        pixels[i, :rows * cols] = rng.uniform(-1, 1, size=(rows * cols, width))
        mask[i, :rows * cols] = 1
    return {"pixel_values": pixels, "pixel_attention_mask": mask,
            "spatial_shapes": np.array(grids, dtype=np.int64)}


#: LFM2-VL's image tokens (the spellings transformers' Lfm2VlProcessor uses)
IMAGE, START, END = "<image>", "<|image_start|>", "<|image_end|>"


def add_image_tokens(folder: str, image_token_id: int) -> None:
    """The image token at the config's id, image start / end just below it, in the
    tokenizer (as special tokens) and its config (the names the processor reads)."""
    import json
    import os

    ids = {IMAGE: image_token_id, START: image_token_id - 2, END: image_token_id - 1}
    path = os.path.join(folder, "tokenizer.json")
    with open(path) as f:
        tokenizer = json.load(f)
    for text, index in ids.items():
        tokenizer["model"]["vocab"][text] = index
        tokenizer["added_tokens"].append({"id": index, "content": text, "single_word": False,
                                          "lstrip": False, "rstrip": False, "normalized": False,
                                          "special": True})
    with open(path, "w") as f:
        json.dump(tokenizer, f)
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config["extra_special_tokens"] = {"image_token": IMAGE, "image_start_token": START,
                                      "image_end_token": END}
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
