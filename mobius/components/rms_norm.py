"""RMSNorm as the standard ONNX RMSNormalization op (opset 23), computed in float32."""

from onnxscript import nn

from mobius.components.weight import Weight


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = Weight([size])

    def forward(self, op, x):
        return op.RMSNormalization(x, self.weight, axis=-1, epsilon=self.eps, stash_type=1)
