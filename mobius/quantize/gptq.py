"""GPTQ: block quantization of one weight with error feedback from activation statistics.

Round-to-nearest (rtn.py) minimizes each weight's own error. What a model
feels is the error of the layer's output, ``X W - X Q`` over the inputs X it
sees; when input channels are correlated, the error rounding made in one row
of W[K, N] can be partly cancelled by nudging the rows not yet quantized.
GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for
Generative Pre-trained Transformers") does exactly that, one input channel at
a time, from H = X^T X alone (the calibration's Gram matrix,
activation_stats.py):

- **Act order**: channels are quantized from the most active (largest
  diagonal of H) to the least, so the channels whose error costs the output
  most are rounded while every other channel can still absorb their error,
  and the quiet ones, rounded last, owe little. Measured on SmolLM2-135M
  int4 calibrated on one speech of testing/text and scored on the other
  (docs/quantization.md): the perplexity increase falls from +44% (natural
  order) to ~+25%.
- **Static groups**: each block's scale (and zero point) is RTN's choice
  (``minmax`` / ``mse``) on the float weight, fixed before any feedback; in
  act order a block's channels are visited far apart, so a scale fitted when
  its first channel is reached would miss what feedback does to the rest.
  Every emit form takes the result unchanged (QuantizedWeight).
- H is damped (a fraction of its mean diagonal added) so that it is invertible
  even where the calibration text left directions unexplored; U is the upper
  Cholesky factor of H^-1 in act order. The paper adds 1%; a build calibrates
  on a few thousand tokens, and there 1% fits the calibration text's own
  correlations: 100% (DAMPING) measured closest to the float model
  (docs/quantization.md).
- Row k is rounded; its error, divided by U[k, k], is spread over the later
  rows through U[k, k+1:], the least-squares optimal correction given the
  rows already fixed. Updates to rows outside the current batch of rows are
  applied once per batch (one matrix product instead of a rank-1 update per
  row).

Channels the calibration never activated (zero diagonal) come last, get no
feedback and are rounded plainly. Where H is diagonal the result is RTN's
exactly.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.quantize.rtn import MSE, quantize_rtn_kn

#: fraction of mean(diag(H)) added to the diagonal (the paper: 1%; see the module docstring)
DAMPING = 1.0
#: rows per lazy batch
_BATCH_ROWS = 128


@dataclasses.dataclass(frozen=True)
class Factor:
    """What GPTQ keeps of one input's statistics (one factor serves every weight that
    reads that input).

    Attributes:
        order: int [K], the input channels in the order they are quantized.
        upper: float32 [K, K], U with U^T U = the damped H^-1, rows and columns in
            ``order``.
    """

    order: np.ndarray
    upper: np.ndarray


def gptq_factor(hessian: np.ndarray, damping: float = DAMPING,
                act_order: bool = True) -> Factor:
    """The :class:`Factor` of ``hessian`` [K, K] (the sum of x^T x over the
    calibration's inputs x [tokens, K]); ``act_order=False`` keeps the channels'
    natural order (for comparison)."""
    diagonal = np.diag(hessian)
    order = (np.argsort(-diagonal, kind="stable") if act_order
             else np.arange(diagonal.size))
    permuted = np.asarray(hessian, dtype=np.float64)[np.ix_(order, order)]
    return Factor(order, inverse_cholesky(permuted, damping))


def quantize_gptq_kn(weight: np.ndarray, factor: Factor, bits: int, block_size: int,
                     symmetric: bool, method: str = MSE) -> QuantizedWeight:
    """weight: float [K, N] (the MatMul layout)."""
    cols, rows = weight.shape
    if factor.upper.shape != (cols, cols):
        raise ValueError(f"hessian shape {list(factor.upper.shape)} does not match K = {cols}")
    grid = quantize_rtn_kn(np.ascontiguousarray(weight, dtype=np.float32), bits, block_size,
                           symmetric, method)
    work = np.asarray(weight, dtype=np.float32)[factor.order]
    codes = np.empty((rows, cols), dtype=np.uint8)
    scales = grid.scales
    steps = (scales, np.where(scales == 0, 0, 1 / np.where(scales == 0, 1, scales)),
             grid.zero_point_array().astype(np.float32))  # per block, made once
    for first in range(0, cols, _BATCH_ROWS):
        last = min(cols, first + _BATCH_ROWS)
        errors = _quantize_batch(work, factor, first, last, (grid, steps), codes)
        work[last:] -= factor.upper[first:last, last:].T @ errors
    return QuantizedWeight(codes, grid.scales, grid.zero_points, bits, block_size)


def inverse_cholesky(hessian: np.ndarray, damping: float = DAMPING) -> np.ndarray:
    """float32 upper U with U^T U = (H + damping * mean(diag H) * I)^-1; dead channels
    (zero diagonal) become independent unit channels."""
    h = np.array(hessian, dtype=np.float64, copy=True)
    diagonal = np.diag(h).copy()
    dead = diagonal <= 0
    h[dead, :] = 0
    h[:, dead] = 0
    diagonal[dead] = 1
    live = diagonal[~dead]
    h[np.diag_indices_from(h)] = diagonal + damping * (live.mean() if live.size else 1.0)
    inverse = np.linalg.inv(h)
    return np.linalg.cholesky((inverse + inverse.T) / 2).T.astype(np.float32)


def _quantize_batch(work, factor: Factor, first: int, last: int, grid_steps,
                    codes: np.ndarray) -> np.ndarray:
    """Rows first..last of ``work`` (act order; updated in place) rounded on the grid's
    scales (``grid_steps``: the RTN grid and its per-block scales, inverse scales and
    float zero points) into their channels' columns of ``codes``; returns the scaled
    errors [last - first, N] that the rows after the batch still owe."""
    grid, (scales, inverses, zeros) = grid_steps
    upper = factor.upper
    levels = (1 << grid.bits) - 1
    errors = np.empty((last - first, work.shape[1]), dtype=np.float32)
    for k in range(first, last):
        channel = factor.order[k]
        block = channel // grid.block_size
        scale, inverse, zero = scales[:, block], inverses[:, block], zeros[:, block]
        q = np.clip(np.rint(work[k] * inverse) + zero, 0, levels)
        codes[:, channel] = q
        error = (work[k] - (q - zero) * scale) / upper[k, k]
        work[k + 1 : last] -= np.outer(upper[k, k + 1 : last], error)
        errors[k - first] = error
    return errors
