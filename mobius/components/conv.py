"""1-D convolution over [batch, channels, length] as the standard ONNX ``Conv`` op.

The weight keeps PyTorch's ``nn.Conv1d`` layout [out_channels, in_channels /
groups, kernel_size], which is also ONNX Conv's, so the checkpoint tensor is
used as is. A weight-normalized convolution (``torch.nn.utils.weight_norm``)
gets its weight computed once at build time (:func:`weight_norm`).
"""

from __future__ import annotations

import numpy as np
from onnxscript import nn

from mobius.components.weight import Sources, Weight

#: how checkpoints spell weight_norm's magnitude and direction: transformers 5 /
#: torch.nn.utils.parametrizations, then the older torch.nn.utils.weight_norm
WEIGHT_NORM_SPELLINGS = (("parametrizations.weight.original0", "parametrizations.weight.original1"),
                         ("weight_g", "weight_v"))


class Conv1d(nn.Module):
    """y = conv1d(x, W) + b (PyTorch ``nn.Conv1d``) with zero ``padding``: an int pads
    both ends alike, a (begin, end) pair each end on its own."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *,
                 stride: int = 1, padding: int | tuple[int, int] = 0, bias: bool = True,
                 groups: int = 1):
        super().__init__()
        self.kernel_size, self.stride, self.groups = kernel_size, stride, groups
        self.pads = [padding, padding] if isinstance(padding, int) else list(padding)
        self.weight = Weight([out_channels, in_channels // groups, kernel_size])
        self.bias = Weight([out_channels]) if bias else None

    def forward(self, op, x):
        inputs = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return op.Conv(*inputs, kernel_shape=[self.kernel_size], strides=[self.stride],
                       pads=self.pads, dilations=[1], group=self.groups)


def weight_norm(shape: list[int], dim: int) -> Weight:
    """The weight of ``torch.nn.utils.weight_norm(module, dim=dim)``: g * v / ||v||, the
    norm taken over every axis but ``dim``; g has v's shape with 1 on those axes."""
    g_shape = tuple(n if axis == dim else 1 for axis, n in enumerate(shape))
    axes = tuple(axis for axis in range(len(shape)) if axis != dim)

    def combine(g: np.ndarray, v: np.ndarray) -> np.ndarray:
        v = v.astype(np.float64)
        norm = np.sqrt(np.square(v).sum(axis=axes, keepdims=True))
        return (g.astype(np.float64) * v / norm).astype(np.float32)

    return Weight(shape, sources=Sources(WEIGHT_NORM_SPELLINGS, (g_shape, tuple(shape)), combine))
