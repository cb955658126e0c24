"""LayerNorm as the standard ONNX LayerNormalization op, computed in float32.

``bias=False`` drops the shift (Cohere, StableLM's per-head norms);
``affine=False`` has no parameters at all (OLMo 1): the scale is a constant 1;
``weight_offset`` folds a stored ``w - 1`` into the initializer (Nemotron's
LayerNorm1P computes ``x_hat * (1 + w) + b``).
"""

import numpy as np
from onnxscript import nn

from mobius.components.weight import Weight, constant
from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype


class LayerNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5, bias: bool = True, *, affine: bool = True,
                 weight_offset: float = 0.0):
        super().__init__()
        self.eps = eps
        if affine:
            transform = None
            if weight_offset:
                transform = lambda w: w.astype(np.float32) + np.float32(weight_offset)  # noqa: E731
            self.weight = Weight([size], transform=transform)
        else:
            self.weight = constant(np.ones([size], numpy_dtype(get_build_dtype())), "weight")
        self.bias = Weight([size]) if bias and affine else None

    def forward(self, op, x):
        return op.LayerNormalization(x, self.weight, self.bias, axis=-1, epsilon=self.eps,
                                     stash_type=1)
