"""Gaussian top-k activation sparsity (Gemma 3n's sparse MLP gates).

For a target sparsity s, the cutoff is mean + std * Phi^-1(s) over the last axis
(std without Bessel's correction, Phi the standard normal CDF): values below it become
0 and the rest are shifted down by it, relu(x - cutoff). Were x normal, a fraction s of
it would fall below the cutoff.
"""

from __future__ import annotations

import statistics

import numpy as np
import onnx_ir as ir

from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype


def std_multiplier(sparsity: float) -> float:
    """Phi^-1(sparsity): where a fraction ``sparsity`` of a standard normal lies below."""
    return statistics.NormalDist().inv_cdf(sparsity)


def gaussian_topk(op, x, sparsity: float):
    """relu(x - (mean + std * Phi^-1(sparsity))) over x's last axis."""
    axes = op.Constant(value_ints=[-1])
    mean = op.ReduceMean(x, axes, keepdims=1)
    centered = op.Sub(x, mean)
    std = op.Sqrt(op.ReduceMean(op.Mul(centered, centered), axes, keepdims=1))
    multiplier = np.array(std_multiplier(sparsity), dtype=numpy_dtype(get_build_dtype()))
    cutoff = op.Add(mean, op.Mul(std, op.Constant(value=ir.tensor(multiplier))))
    return op.Relu(op.Sub(x, cutoff))
