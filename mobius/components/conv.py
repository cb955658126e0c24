"""1-D convolution over [batch, channels, length] as the standard ONNX ``Conv`` op.

The weight keeps PyTorch's ``nn.Conv1d`` layout [out_channels, in_channels,
kernel_size], which is also ONNX Conv's, so the checkpoint tensor is used as is.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components.weight import Weight


class Conv1d(nn.Module):
    """y = conv1d(x, W) + b with symmetric zero ``padding`` (PyTorch ``nn.Conv1d``)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *,
                 stride: int = 1, padding: int = 0, bias: bool = True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.weight = Weight([out_channels, in_channels, kernel_size])
        self.bias = Weight([out_channels]) if bias else None

    def forward(self, op, x):
        inputs = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return op.Conv(*inputs, kernel_shape=[self.kernel_size], strides=[self.stride],
                       pads=[self.padding, self.padding], dilations=[1], group=1)
