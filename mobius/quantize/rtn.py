"""Round-to-nearest block quantization of one float weight, vectorized in numpy.

The work runs on the MatMul layout W[K, N] (what the graph holds), blocks of
``block_size`` rows at a time: each slice is contiguous and the block
reductions run over a free reshape. Each chunk's uint8 codes and scales are
written transposed into their columns of the QuantizedWeight layout [N, K]
as soon as they are made, while they are in cache (one transpose of a whole
layer's codes at the end cost 30-50% of the quantization). Chunks are
independent, so they run on a few threads (numpy releases the GIL in its
loops); the result does not depend on their order. Temporaries stay a few MB
per chunk even for an lm_head.

Every element is reconstructed within half a step: symmetric scales take the
grid's asymmetric range (-2**(b-1) .. 2**(b-1)-1) into account instead of
wasting a level (and choose per block between two such scales, see
_symmetric), and asymmetric zero points round the grid without clipping more
than half a step at the top.
"""

from __future__ import annotations

import numpy as np

from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.threads import MAX_THREADS, run_on_threads

_CHUNK_ELEMENTS = 1 << 21  # floats per chunk (8 MB)
_BAND_ELEMENTS = 1 << 24  # floats per band of rows read at a time (64 MB)
_MAGIC = np.float32(1.5 * 2**23)
#: threads quantizing one weight's chunks (each holds ~3 chunks of temporaries)
THREADS = MAX_THREADS


def quantize_rtn(weight: np.ndarray, bits: int, block_size: int,
                 symmetric: bool) -> QuantizedWeight:
    """weight: float [N, K] (the checkpoint's Linear layout)."""
    return quantize_rtn_kn(np.asarray(weight).T, bits, block_size, symmetric)


def quantize_rtn_rows(weight, bits: int, block_size: int, symmetric: bool) -> QuantizedWeight:
    """weight: a float [N, K] tensor; read ``_BAND_ELEMENTS`` values of rows at a time
    where it can give its rows alone (``read_rows``: a checkpoint tensor as stored).

    An LM head or embedding table is the largest tensor of a model (2 GB for
    Llama-3.1-8B's head in float32); held whole beside its codes it set the
    build's peak memory. Band by band, only one band of floats is held.
    """
    read_rows = getattr(weight, "read_rows", None)
    if read_rows is None:
        return quantize_rtn(weight.numpy(), bits, block_size, symmetric)
    rows, cols = weight.shape
    blocks = -(-cols // block_size)
    codes = np.empty((rows, cols), dtype=np.uint8)
    scales = np.empty((rows, blocks), dtype=np.float32)
    zeros = None if symmetric else np.empty((rows, blocks), dtype=np.uint8)
    band = max(1, _BAND_ELEMENTS // max(1, cols))
    for start in range(0, rows, band):
        stop = min(rows, start + band)
        part = quantize_rtn(read_rows(start, stop), bits, block_size, symmetric)
        codes[start:stop], scales[start:stop] = part.codes, part.scales
        if zeros is not None:
            zeros[start:stop] = part.zero_points
    return QuantizedWeight(codes, scales, zeros, bits, block_size)


def quantize_rtn_kn(weight: np.ndarray, bits: int, block_size: int,
                    symmetric: bool) -> QuantizedWeight:
    """weight: float [K, N] (the MatMul layout); best C-contiguous."""
    cols, rows = weight.shape  # K, N
    blocks = -(-cols // block_size)
    codes = np.empty((rows, cols), dtype=np.uint8)
    scales = np.empty((rows, blocks), dtype=np.float32)
    zeros = None if symmetric else np.empty((rows, blocks), dtype=np.uint8)
    step = max(1, _CHUNK_ELEMENTS // max(1, rows * block_size))

    def quantize_chunk(first: int) -> None:
        last = min(blocks, first + step)
        top = min(cols, last * block_size)
        chunk = _blocked(weight[first * block_size : top], last - first, block_size)
        if symmetric:
            scales[:, first:last] = _symmetric(chunk, bits).T
        else:
            chunk_scales, chunk_zeros = _asymmetric(chunk, bits)
            scales[:, first:last], zeros[:, first:last] = chunk_scales.T, chunk_zeros.T
        codes[:, first * block_size : top] = chunk.reshape(-1, rows)[: top - first * block_size].T

    run_on_threads(quantize_chunk, range(0, blocks, step), THREADS)
    return QuantizedWeight(codes, scales, zeros, bits, block_size)


def _blocked(rows: np.ndarray, blocks: int, block_size: int) -> np.ndarray:
    """float32 [blocks, block_size, N], a fresh buffer (zero-padded along K) to work in."""
    out = np.zeros((blocks * block_size, rows.shape[1]), dtype=np.float32)
    out[: rows.shape[0]] = rows
    return out.reshape(blocks, block_size, -1)


def _symmetric(blocks: np.ndarray, bits: int) -> np.ndarray:
    """Codes in place (implicit zero point 2**(b-1)); returns the scales [blocks, N].

    The grid -2**(b-1) .. 2**(b-1)-1 has one more step below zero: the side of
    the block with the larger magnitude gets it (a negative scale mirrors the
    grid when that side is positive). Of two such scales, the one spanning
    the block exactly (exact on weights that lie on a grid) and the half-step
    finer one that lets the extremes round off the grid's ends by up to half a
    step, each block takes whichever reconstructs it with the smaller squared
    error; every element stays within half a step.
    """
    half = 1 << (bits - 1)
    top = np.maximum(blocks.max(axis=1), 0)
    bottom = np.maximum(-blocks.min(axis=1), 0)
    sign = np.where(top > bottom, np.float32(-1), np.float32(1))
    big, small = np.maximum(top, bottom), np.minimum(top, bottom)
    best_scale = best_error = None
    for big_steps, small_steps in ((half, half - 1), (half + 0.5, half - 0.5)):
        scale = (sign * np.maximum(big / big_steps, small / small_steps)).astype(np.float32)
        error = _signed_codes(blocks, _inverse(scale), half)
        error *= scale[:, None, :]
        error -= blocks
        error = np.einsum("bkn,bkn->bn", error, error)
        if best_scale is None:
            best_scale, best_error = scale, error
        else:
            best_scale = np.where(error < best_error, scale, best_scale)
    codes = _signed_codes(blocks, _inverse(best_scale), half)
    np.add(codes, half, out=blocks)
    return best_scale


def _signed_codes(blocks: np.ndarray, inverse: np.ndarray, half: int) -> np.ndarray:
    """clip(rint(blocks / scale), -half, half - 1), a new array."""
    codes = blocks * inverse[:, None, :]
    _round(codes)
    np.clip(codes, -half, half - 1, out=codes)
    return codes


def _round(values: np.ndarray) -> None:
    """Round half to even in place, like np.rint but several times faster on float32:
    adding 1.5 * 2**23 leaves no fraction bits (valid for |values| < 2**22)."""
    values += _MAGIC
    values -= _MAGIC


def _asymmetric(blocks: np.ndarray, bits: int):
    """Codes in place over the block's [min, max] widened to 0; returns (scales, zeros)."""
    levels = (1 << bits) - 1
    low = np.minimum(blocks.min(axis=1), 0)
    high = np.maximum(blocks.max(axis=1), 0)
    scale = ((high - low) / levels).astype(np.float32)
    inverse = _inverse(scale)
    zero = np.clip(np.rint(-low * inverse), 0, levels).astype(np.float32)
    _to_codes(blocks, inverse, zero, levels)
    return scale, zero.astype(np.uint8)


def _to_codes(blocks: np.ndarray, inverse: np.ndarray, zero, levels: int) -> None:
    """blocks <- clip(rint(blocks / scale) + zero, 0, levels), in place."""
    blocks *= inverse[:, None, :]
    _round(blocks)
    blocks += zero[:, None, :] if isinstance(zero, np.ndarray) else zero
    np.clip(blocks, 0, levels, out=blocks)


def _inverse(scale: np.ndarray) -> np.ndarray:
    """1 / scale, 0 where a block is all zeros (its codes are then the zero point)."""
    safe = np.where(scale == 0, 1, scale)
    return np.where(scale == 0, 0, 1 / safe).astype(np.float32)
