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
        # No bias: leave the optional input out. An empty-named input ("") crashed
        # onnxruntime 1.32's LayerNormalization fusions at the extended level.
        inputs = (x, self.weight) if self.bias is None else (x, self.weight, self.bias)
        return op.LayerNormalization(*inputs, axis=-1, epsilon=self.eps, stash_type=1)


class PerHeadLayerNorm(nn.Module):
    """One LayerNorm per attention head over x [batch, seq, heads, head_dim]:
    StableLM's ``norms.{h}`` (one module per head) or, with ``stacked``,
    Cohere's single ``weight`` [heads, head_dim]; both without a bias."""

    def __init__(self, head_dim: int, num_heads: int, eps: float, *, stacked: bool = False):
        super().__init__()
        self.eps = eps
        self.num_heads = num_heads
        self.stacked = stacked
        if stacked:
            self.weight = Weight([num_heads, head_dim])
            self.unit = constant(np.ones([head_dim], numpy_dtype(get_build_dtype())), "unit")
        else:
            self.norms = nn.ModuleList([LayerNorm(head_dim, eps, bias=False)
                                        for _ in range(num_heads)])

    def forward(self, op, x):
        if self.stacked:
            normed = op.LayerNormalization(x, self.unit, axis=-1, epsilon=self.eps, stash_type=1)
            return op.Mul(normed, self.weight)
        heads = op.Split(x, axis=2, num_outputs=self.num_heads, _outputs=self.num_heads)
        if self.num_heads == 1:
            heads = [heads]
        return op.Concat(*(norm(op, h) for norm, h in zip(self.norms, heads)), axis=2)
