"""Gated MLP: down(act(gate(x)) * up(x))."""

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.linear import Linear


class GatedMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "silu",
                 bias: bool = False):
        super().__init__()
        self.activation = activation
        self.gate_proj = Linear(hidden_size, intermediate_size, bias)
        self.up_proj = Linear(hidden_size, intermediate_size, bias)
        self.down_proj = Linear(intermediate_size, hidden_size, bias)

    def forward(self, op, x):
        gate = apply_activation(op, self.gate_proj(op, x), self.activation)
        return self.down_proj(op, op.Mul(gate, self.up_proj(op, x)))
