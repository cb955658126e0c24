"""GPTQ: block quantization of one weight with error feedback from activation statistics.

Round-to-nearest (rtn.py) minimizes each weight's own error. What a model
feels is the error of the layer's output, ``X W - X Q`` over the inputs X it
sees; when input channels are correlated, the error rounding made in one row
of W[K, N] can be partly cancelled by nudging the rows not yet quantized.
GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for
Generative Pre-trained Transformers") does exactly that, one input channel at
a time, from H = X^T X alone (the calibration's Gram matrix,
activation_stats.py):

- H is damped (a fraction of its mean diagonal added) so that it is invertible
  even where the calibration text left directions unexplored; U is the upper
  Cholesky factor of H^-1. The paper adds 1%; a build calibrates on a few
  thousand tokens, and there 1% fits the calibration text's own
  correlations. Measured on SmolLM2-135M int4 (calibrated on the repository's
  prose, scored on testing/text; docs/quantization.md): 1% and 10% are worse
  than RTN by both perplexity and KL from the float model, 100% (DAMPING)
  is closer to the float model than RTN by KL and top-1 agreement, though
  not by perplexity. Per layer, on held-out text, 10% gave the least output
  error (0.56 x RTN's, geometric mean of 21 layers; 100%: 0.60 x): per-layer
  error with float inputs does not predict the whole model's.
- Row k is rounded; its error, divided by U[k, k], is spread over the later
  rows through U[k, k+1:], which is the least-squares optimal correction
  given the rows already fixed. Updates to rows outside the current batch of
  rows are applied once per batch (one matrix product instead of a rank-1
  update per row).
- Scales are block-wise along K like RTN's: each block's scale (and zero
  point) is chosen by the same RTN method (``minmax`` / ``mse``) when its
  first row is reached, on the rows as error feedback has left them, so
  every emit form takes the result unchanged (QuantizedWeight).

Channels the calibration never activated (zero diagonal) get no feedback and
are rounded plainly. Where H is the identity the result is RTN's exactly.
"""

from __future__ import annotations

import numpy as np

from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.quantize.rtn import MSE, quantize_rtn_kn

#: fraction of mean(diag(H)) added to the diagonal (the paper: 1%; see the module docstring)
DAMPING = 1.0
#: rows per lazy batch (a multiple of the block size is used)
_BATCH_ROWS = 128


def quantize_gptq_kn(weight: np.ndarray, factor: np.ndarray, bits: int, block_size: int,
                     symmetric: bool, method: str = MSE) -> QuantizedWeight:
    """weight: float [K, N] (the MatMul layout); factor: :func:`inverse_cholesky` of the
    Gram matrix of this MatMul's inputs (one factor serves every weight that
    reads the same input)."""
    work = np.array(weight, dtype=np.float32, copy=True)
    cols, rows = work.shape
    if factor.shape != (cols, cols):
        raise ValueError(f"hessian shape {list(factor.shape)} does not match K = {cols}")
    upper = factor
    blocks = -(-cols // block_size)
    codes = np.empty((rows, cols), dtype=np.uint8)
    scales = np.empty((rows, blocks), dtype=np.float32)
    zeros = np.empty((rows, blocks), dtype=np.uint8)
    batch = max(1, _BATCH_ROWS // block_size) * block_size
    for first in range(0, cols, batch):
        last = min(cols, first + batch)
        errors = _quantize_batch(work, upper, first, last, (codes, scales, zeros),
                                 (bits, block_size, symmetric, method))
        work[last:] -= upper[first:last, last:].T @ errors
    return QuantizedWeight(codes, scales, None if symmetric else zeros, bits, block_size)


def inverse_cholesky(hessian: np.ndarray, damping: float = DAMPING) -> np.ndarray:
    """float32 upper U with U^T U = (H + damping * mean(diag H) * I)^-1; dead channels
    (zero diagonal) become independent unit channels. ``hessian``: [K, K], the sum
    of x^T x over the calibration's inputs x [tokens, K]."""
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


def _quantize_batch(work, upper, first: int, last: int, out, grid) -> np.ndarray:
    """Rows first..last of ``work`` (updated in place), their codes / scales / zero points
    written into ``out``; returns the scaled errors [last - first, N] that the
    rows after the batch still owe."""
    codes, scales, zeros = out
    bits, block_size, symmetric, method = grid
    levels = (1 << bits) - 1
    errors = np.empty((last - first, work.shape[1]), dtype=np.float32)
    for k in range(first, last):
        if k % block_size == 0:
            block = k // block_size
            scale, zero = _block_grid(work[k : k + block_size], bits, block_size, symmetric,
                                      method)
            scales[:, block], zeros[:, block] = scale, zero
            inverse = np.where(scale == 0, 0, 1 / np.where(scale == 0, 1, scale))
            zero_f = zero.astype(np.float32)
        q = np.clip(np.rint(work[k] * inverse) + zero_f, 0, levels)
        codes[:, k] = q
        error = (work[k] - (q - zero_f) * scale) / upper[k, k]
        work[k + 1 : last] -= np.outer(upper[k, k + 1 : last], error)
        errors[k - first] = error
    return errors


def _block_grid(rows: np.ndarray, bits: int, block_size: int, symmetric: bool, method: str):
    """(scale [N], zero point [N]) that RTN's ``method`` picks for one block of rows."""
    part = quantize_rtn_kn(np.ascontiguousarray(rows), bits, block_size, symmetric, method)
    return part.scales[:, 0].astype(np.float32), part.zero_point_array()[:, 0]
