"""Linear projection, stored as a MatMul weight [in, out] (+ optional bias)."""

from onnxscript import nn

from mobius.components.weight import Weight, transpose


class Linear(nn.Module):
    """y = x @ W^T + b, with W kept pre-transposed so no Transpose runs at inference."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 checkpoint_name: str | None = None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Weight(
            [in_features, out_features],
            checkpoint_shape=[out_features, in_features],
            transform=transpose,
            checkpoint_name=checkpoint_name,
        )
        self.bias = Weight([out_features]) if bias else None

    def forward(self, op, x):
        y = op.MatMul(x, self.weight)
        if self.bias is not None:
            y = op.Add(y, self.bias)
        return y
