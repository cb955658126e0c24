"""RMSNorm as the standard ONNX RMSNormalization op (opset 23), computed in float32."""

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.weight import Weight
from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype


class RMSNorm(nn.Module):
    """y = x / rms(x) * w.

    ``weight_offset`` supports families that store the scale as ``w - 1``
    (Gemma's ``x * (1 + w)``): the offset is folded into the initializer at
    load time, so the graph is the plain standard op.
    """

    def __init__(self, size: int, eps: float = 1e-6, weight_offset: float = 0.0):
        super().__init__()
        self.eps = eps
        transform = None
        if weight_offset:
            transform = lambda w: w.astype(np.float32) + np.float32(weight_offset)  # noqa: E731
        self.weight = Weight([size], transform=transform)

    def forward(self, op, x):
        return op.RMSNormalization(x, self.weight, axis=-1, epsilon=self.eps, stash_type=1)


class UnitRMSNorm(nn.Module):
    """RMSNorm without a scale (Gemma 3n / Gemma 4: V's norm)."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.size, self.eps = size, eps

    def forward(self, op, x):
        ones = ir.tensor(np.ones(self.size, dtype=numpy_dtype(get_build_dtype())))
        return op.RMSNormalization(x, op.Constant(value=ones), axis=-1, epsilon=self.eps,
                                   stash_type=1)
