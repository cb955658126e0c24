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
