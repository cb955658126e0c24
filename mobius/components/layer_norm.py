"""LayerNorm (with bias) as the standard ONNX LayerNormalization op, computed in float32."""

from onnxscript import nn

from mobius.components.weight import Weight


class LayerNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = Weight([size])
        self.bias = Weight([size]) if bias else None

    def forward(self, op, x):
        return op.LayerNormalization(x, self.weight, self.bias, axis=-1, epsilon=self.eps,
                                     stash_type=1)
