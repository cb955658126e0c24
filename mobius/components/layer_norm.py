"""LayerNorm (optional bias) as the standard ONNX LayerNormalization op, computed in float32."""

from onnxscript import nn

from mobius.components.weight import Weight


class LayerNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = Weight([size])
        self.bias = Weight([size]) if bias else None

    def forward(self, op, x):
        # No bias: leave the optional input out. An empty-named input ("") crashed
        # onnxruntime 1.32's LayerNormalization fusions at the extended level.
        inputs = (x, self.weight) if self.bias is None else (x, self.weight, self.bias)
        return op.LayerNormalization(*inputs, axis=-1, epsilon=self.eps, stash_type=1)
