"""Round-to-nearest block quantization of one float weight, vectorized in numpy.

Rows are quantized a chunk at a time, so the temporaries stay a few MB even
for an lm_head. Every element is reconstructed within half a step:
symmetric scales take the grid's asymmetric range (-2**(b-1) .. 2**(b-1)-1)
into account instead of wasting a level, and asymmetric zero points round the
grid without clipping more than half a step at the top.
"""

from __future__ import annotations

import numpy as np

from mobius.quantize.quantized_weight import QuantizedWeight

_ROWS_PER_CHUNK = 1024


def quantize_rtn(weight: np.ndarray, bits: int, block_size: int,
                 symmetric: bool) -> QuantizedWeight:
    """weight: float [N, K] (the checkpoint's Linear layout, any strides)."""
    rows, cols = weight.shape
    blocks = -(-cols // block_size)
    codes = np.empty((rows, cols), dtype=np.uint8)
    scales = np.empty((rows, blocks), dtype=np.float32)
    zeros = None if symmetric else np.empty((rows, blocks), dtype=np.uint8)
    for start in range(0, rows, _ROWS_PER_CHUNK):
        stop = min(rows, start + _ROWS_PER_CHUNK)
        chunk = _blocked(weight[start:stop], blocks, block_size)
        if symmetric:
            c, s = _symmetric(chunk, bits)
        else:
            c, s, z = _asymmetric(chunk, bits)
            zeros[start:stop] = z
        codes[start:stop] = c.reshape(stop - start, -1)[:, :cols]
        scales[start:stop] = s
    return QuantizedWeight(codes, scales, zeros, bits, block_size)


def _blocked(rows: np.ndarray, blocks: int, block_size: int) -> np.ndarray:
    """float32 [n, blocks, block_size], zero-padded along K."""
    n, cols = rows.shape
    out = np.zeros((n, blocks * block_size), dtype=np.float32)
    out[:, :cols] = rows
    return out.reshape(n, blocks, block_size)


def _symmetric(blocks: np.ndarray, bits: int):
    """Implicit zero point 2**(b-1): codes - zp spans [-2**(b-1), 2**(b-1) - 1]."""
    half = 1 << (bits - 1)
    top = np.maximum(blocks.max(axis=-1), 0) / (half - 1)
    bottom = np.maximum(-blocks.min(axis=-1), 0) / half
    scale = np.maximum(top, bottom).astype(np.float32)
    q = np.rint(blocks * _inverse(scale)[..., None]) + half
    return np.clip(q, 0, 2 * half - 1).astype(np.uint8), scale


def _asymmetric(blocks: np.ndarray, bits: int):
    """The block's [min, max] (widened to include 0) spread over 2**b levels."""
    levels = (1 << bits) - 1
    low = np.minimum(blocks.min(axis=-1), 0)
    high = np.maximum(blocks.max(axis=-1), 0)
    scale = ((high - low) / levels).astype(np.float32)
    inverse = _inverse(scale)
    zero = np.clip(np.rint(-low * inverse), 0, levels)
    q = np.rint(blocks * inverse[..., None]) + zero[..., None]
    return np.clip(q, 0, levels).astype(np.uint8), scale, zero.astype(np.uint8)


def _inverse(scale: np.ndarray) -> np.ndarray:
    """1 / scale, 0 where a block is all zeros (its codes are then the zero point)."""
    safe = np.where(scale == 0, 1, scale)
    return np.where(scale == 0, 0, 1 / safe).astype(np.float32)
