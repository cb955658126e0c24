"""Weights exactly on a block quantization grid (for exactness tests of quantized builds)."""

from __future__ import annotations

import numpy as np


def on_grid(shape, block: int, symmetric: bool, rng, bits: int = 4) -> np.ndarray:
    """float32 [N, K]: (code - zero) * scale per block of K, codes spanning the whole
    grid in each block (so round-to-nearest must recover them exactly)."""
    rows, cols = shape
    top = (1 << bits) - 1
    codes = rng.integers(0, top + 1, (rows, cols))
    starts = np.arange(0, cols, block)
    codes[:, starts] = 0
    codes[:, np.minimum(starts + 1, cols - 1)] = top
    blocks = len(starts)
    zeros = (np.full((rows, blocks), 1 << (bits - 1)) if symmetric
             else rng.integers(0, top + 1, (rows, blocks)))
    scales = rng.uniform(0.004, 0.02, (rows, blocks)).astype(np.float32)
    index = np.arange(cols) // block
    return ((codes - zeros[:, index]) * scales[:, index]).astype(np.float32)
