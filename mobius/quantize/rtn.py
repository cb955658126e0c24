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

How a block's range is chosen is the method (``METHODS``):

- ``minmax``: the grid spans the block exactly (symmetric: its larger side,
  taking the grid's extra negative step; asymmetric: [min, max] widened to
  0). Every element is reconstructed within half a step; weights that lie on
  such a grid come back exactly.
- ``mse``: per block, of a few candidate ranges, the one that
  reconstructs the block with the least squared error; the exact span is
  always a candidate, so no block gets worse than ``minmax`` and grid weights
  still come back exactly. Symmetric blocks choose between the exact span and
  a half-step finer scale that lets the extremes round off the grid's ends by
  up to half a step. Asymmetric blocks also try ranges narrowed to 95% and 90%
  of [min, max] at a few positions inside it (``_ASYMMETRIC_RANGES``), which
  clip the extremes for a finer step elsewhere.

The build's default method, ``mixed`` (quantize/sensitive.py), is ``mse``
here with a few sensitive tensors at int8. Judged by model quality on real
weights, not by weight error alone (docs/benchmarks.md, "int4 quality on
real weights"): symmetric ``mse`` beats ``minmax`` on SmolLM2-135M and on
all-MiniLM-L6-v2; asymmetric ``mse`` is closer to the float model by KL yet
its perplexity on the evaluation text is higher, so it stays opt-in
(``--quant-asymmetric``).
"""

from __future__ import annotations

import numpy as np

from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.threads import MAX_THREADS, run_on_threads

_CHUNK_ELEMENTS = 1 << 21  # floats per chunk (8 MB)
_BAND_ELEMENTS = 1 << 24  # floats per band of rows read at a time (64 MB)
_MAGIC = np.float32(1.5 * 2**23)
MINMAX, MSE = "minmax", "mse"
#: --quant-method values (see the module docstring)
METHODS = (MINMAX, MSE)
#: asymmetric candidate ranges of the ``mse`` method: (fraction of [min, max]
#: kept, where it sits: 0 keeps the minimum, 1 the maximum). The first is the
#: exact span; the rest are those the search picked for >1% of SmolLM2's and
#: MiniLM's blocks among 30 (fractions 0.75..1 at 5 positions).
_ASYMMETRIC_RANGES = ((1.0, 0.0), (0.95, 0.0), (0.95, 0.25), (0.95, 0.5), (0.9, 0.0),
                      (0.9, 0.25), (0.9, 0.5), (0.9, 0.75))
#: threads quantizing one weight's chunks (each holds ~3 chunks of temporaries)
THREADS = MAX_THREADS


def quantize_rtn(weight: np.ndarray, bits: int, block_size: int,
                 symmetric: bool, method: str = MSE) -> QuantizedWeight:
    """weight: float [N, K] (the checkpoint's Linear layout)."""
    return quantize_rtn_kn(np.asarray(weight).T, bits, block_size, symmetric, method)


def quantize_rtn_rows(weight, bits: int, block_size: int, symmetric: bool,
                      method: str = MSE) -> QuantizedWeight:
    """weight: a float [N, K] tensor; read ``_BAND_ELEMENTS`` values of rows at a time
    where it can give its rows alone (``read_rows``: a checkpoint tensor as stored).

    An LM head or embedding table is the largest tensor of a model (2 GB for
    Llama-3.1-8B's head in float32); held whole beside its codes it set the
    build's peak memory. Band by band, only one band of floats is held.
    """
    read_rows = getattr(weight, "read_rows", None)
    if read_rows is None:
        return quantize_rtn(weight.numpy(), bits, block_size, symmetric, method)
    rows, cols = weight.shape
    blocks = -(-cols // block_size)
    codes = np.empty((rows, cols), dtype=np.uint8)
    scales = np.empty((rows, blocks), dtype=np.float32)
    zeros = None if symmetric else np.empty((rows, blocks), dtype=np.uint8)
    band = max(1, _BAND_ELEMENTS // max(1, cols))
    for start in range(0, rows, band):
        stop = min(rows, start + band)
        part = quantize_rtn(read_rows(start, stop), bits, block_size, symmetric, method)
        codes[start:stop], scales[start:stop] = part.codes, part.scales
        if zeros is not None:
            zeros[start:stop] = part.zero_points
    return QuantizedWeight(codes, scales, zeros, bits, block_size)


def quantize_rtn_kn(weight: np.ndarray, bits: int, block_size: int,
                    symmetric: bool, method: str = MSE) -> QuantizedWeight:
    """weight: float [K, N] (the MatMul layout); best C-contiguous."""
    if method not in METHODS:
        raise ValueError(f"unknown quantization method {method!r}; expected one of "
                         f"{', '.join(METHODS)}")
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
            scales[:, first:last] = _symmetric(chunk, bits, method).T
        else:
            chunk_scales, chunk_zeros = _asymmetric(chunk, bits, method)
            scales[:, first:last], zeros[:, first:last] = chunk_scales.T, chunk_zeros.T
        codes[:, first * block_size : top] = chunk.reshape(-1, rows)[: top - first * block_size].T

    run_on_threads(quantize_chunk, range(0, blocks, step), THREADS)
    return QuantizedWeight(codes, scales, zeros, bits, block_size)


def _blocked(rows: np.ndarray, blocks: int, block_size: int) -> np.ndarray:
    """float32 [blocks, block_size, N], a fresh buffer (zero-padded along K) to work in."""
    out = np.zeros((blocks * block_size, rows.shape[1]), dtype=np.float32)
    out[: rows.shape[0]] = rows
    return out.reshape(blocks, block_size, -1)


def _symmetric(blocks: np.ndarray, bits: int, method: str) -> np.ndarray:
    """Codes in place (implicit zero point 2**(b-1)); returns the scales [blocks, N].

    The grid -2**(b-1) .. 2**(b-1)-1 has one more step below zero: the side of
    the block with the larger magnitude gets it (a negative scale mirrors the
    grid when that side is positive). ``mse`` also tries the half-step finer
    scale (module docstring).
    """
    half = 1 << (bits - 1)
    top = np.maximum(blocks.max(axis=1), 0)
    bottom = np.maximum(-blocks.min(axis=1), 0)
    sign = np.where(top > bottom, np.float32(-1), np.float32(1))
    big, small = np.maximum(top, bottom), np.minimum(top, bottom)
    steps = ((half, half - 1),) if method == MINMAX else ((half, half - 1),
                                                          (half + 0.5, half - 0.5))
    best_scale = best_error = None
    for big_steps, small_steps in steps:
        scale = (sign * np.maximum(big / big_steps, small / small_steps)).astype(np.float32)
        if len(steps) == 1:
            best_scale = scale
            break
        error = _signed_codes(blocks, _inverse(scale), half)
        error *= scale[:, None, :]
        error -= blocks
        error = np.einsum("bkn,bkn->bn", error, error)
        best_scale, best_error = _better(best_scale, best_error, scale, error)
    codes = _signed_codes(blocks, _inverse(best_scale), half)
    np.add(codes, half, out=blocks)
    return best_scale


def _better(best, best_error, candidate, error):
    """Per block, the candidate where its error is strictly smaller (ties keep the earlier)."""
    if best is None:
        return candidate, error
    smaller = error < best_error
    return np.where(smaller, candidate, best), np.where(smaller, error, best_error)


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


def _asymmetric(blocks: np.ndarray, bits: int, method: str):
    """Codes in place over a range inside the block's [min, max] widened to 0 (the
    whole range for ``minmax``, the best of ``_ASYMMETRIC_RANGES`` for ``mse``);
    returns (scales, zero points)."""
    levels = (1 << bits) - 1
    low = np.minimum(blocks.min(axis=1), 0)
    span = np.maximum(blocks.max(axis=1), 0) - low
    ranges = _ASYMMETRIC_RANGES[:1] if method == MINMAX else _ASYMMETRIC_RANGES
    best = best_error = None
    for kept, position in ranges:
        scale = (span * np.float32(kept) / np.float32(levels)).astype(np.float32)
        inverse = _inverse(scale)
        start = low + span * np.float32((1 - kept) * position)
        zero = np.clip(np.rint(-start * inverse), 0, levels).astype(np.float32)
        if len(ranges) == 1:
            best = (scale, zero)
            break
        error = blocks * inverse[:, None, :]
        _round(error)
        error += zero[:, None, :]
        np.clip(error, 0, levels, out=error)
        error -= zero[:, None, :]
        error *= scale[:, None, :]
        error -= blocks
        error = np.einsum("bkn,bkn->bn", error, error)
        best, best_error = _better(best, best_error, np.stack([scale, zero]), error)
    scale, zero = best
    _to_codes(blocks, _inverse(scale), zero, levels)
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
