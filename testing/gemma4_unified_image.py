"""The reference for genai's image processor on Gemma 4 Unified packages: transformers'
Gemma4UnifiedImageProcessor, step by step (it runs on torchvision, which is not installed
here), written from what its code does:

1. resize, aspect kept, to the largest height and width that are multiples of the merged
   tile's side (patch_size x pooling_kernel_size) and hold at most ``max_soft_tokens``
   tiles (no resize where the image already has that size); bicubic with antialias on the
   8-bit image, which torchvision does with torch's own uint8 kernel (8-bit result);
2. rescale by 1 / 255 (no normalization);
3. cut patch_size patches and merge each kernel^2 block into one model patch: that is one
   tile of the merged side in raster order, pixels (row, column, channel), its position
   the tile's (x, y);
4. pad the tiles to ``max_soft_tokens`` with zeros at position (-1, -1).

transformers' Gemma4ImageProcessorPil, run at the merged side with a kernel of 1, makes
the same tiles with Pillow's resize (gemma4_unified_cases records both).
"""

from __future__ import annotations

import math

import numpy as np


def target_size(height: int, width: int, side: int, budget: int) -> tuple[int, int]:
    """Step 1's size; an image whose short side would round to 0 is not modelled."""
    factor = math.sqrt(budget * side * side / (height * width))
    size = (math.floor(factor * height / side) * side, math.floor(factor * width / side) * side)
    if min(size) == 0:
        raise ValueError(f"{height} x {width}: too narrow for the reference")
    return size


def resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [height, width, 3], as torchvision resizes a uint8 image."""
    import torch

    if image.shape[:2] == (height, width):
        return image
    chw = torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))[None]
    out = torch.nn.functional.interpolate(chw, size=(height, width), mode="bicubic",
                                          align_corners=False, antialias=True)
    return out[0].numpy().transpose(1, 2, 0)


def pixel_inputs(image: np.ndarray, side: int, budget: int):
    """(pixel_values [budget, 3 * side^2] float32, positions [budget, 2] int64, tiles)."""
    height, width = target_size(*image.shape[:2], side, budget)
    pixels = resize(image, height, width).astype(np.float32) * np.float32(1 / 255)
    rows, columns = height // side, width // side
    tiles = pixels.reshape(rows, side, columns, side, 3).transpose(0, 2, 1, 3, 4)
    values = np.zeros((budget, 3 * side * side), np.float32)
    values[:rows * columns] = tiles.reshape(rows * columns, -1)
    positions = np.full((budget, 2), -1, np.int64)
    x, y = np.meshgrid(np.arange(columns), np.arange(rows), indexing="xy")
    positions[:rows * columns] = np.stack([x.ravel(), y.ravel()], axis=-1)
    return values, positions, rows * columns


def smooth_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """uint8 [height, width, 3]: random low-frequency waves within [40, 215], so that
    neither side's bicubic overshoot is clipped at 0 or 255."""
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    channels = []
    for _ in range(3):
        fx, fy, phase = rng.uniform(1, 4), rng.uniform(1, 4), rng.uniform(0, 2 * np.pi)
        channels.append(np.sin(2 * np.pi * (fx * x + fy * y) + phase))
    return np.round(127.5 + 87 * np.stack(channels, axis=-1)).astype(np.uint8)
