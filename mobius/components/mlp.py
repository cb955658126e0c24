"""MLPs: gated (down(act(gate(x)) * up(x))) and plain (fc2(act(fc1(x))))."""

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.gaussian_topk import gaussian_topk
from mobius.components.linear import Linear
from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype


class GatedMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "silu",
                 bias: bool = False, multipliers: tuple[float, float] = (1.0, 1.0),
                 activation_sparsity: float = 0.0):
        """multipliers: (on gate_proj's output before the activation, on the output):
        Falcon-H1's mup ``mlp_multipliers``. activation_sparsity > 0: the gate's
        gaussian top-k before the activation (Gemma 3n, mobius/components/gaussian_topk.py)."""
        super().__init__()
        self.activation, self.multipliers = activation, multipliers
        self.activation_sparsity = activation_sparsity
        self.gate_proj = Linear(hidden_size, intermediate_size, bias)
        self.up_proj = Linear(hidden_size, intermediate_size, bias)
        self.down_proj = Linear(intermediate_size, hidden_size, bias)

    def forward(self, op, x):
        gate = _scaled(op, self.gate_proj(op, x), self.multipliers[0])
        if self.activation_sparsity > 0.0:
            gate = gaussian_topk(op, gate, self.activation_sparsity)
        out = self.down_proj(op, op.Mul(apply_activation(op, gate, self.activation),
                                        self.up_proj(op, x)))
        return _scaled(op, out, self.multipliers[1])


def _scaled(op, x, multiplier: float):
    if multiplier == 1.0:
        return x
    value = ir.tensor(np.array(multiplier, dtype=numpy_dtype(get_build_dtype())))
    return op.Mul(x, op.Constant(value=value))


class MLP(nn.Module):
    """fc2(act(fc1(x))); attribute names as in Phi, or ``names`` (StarCoder2:
    c_fc, c_proj; Nemotron: up_proj, down_proj); GPT-2 passes its own Linears.
    ``activation``: a transformers name, or a module with its own checkpoint
    parameters, held as ``act_fn`` as transformers does (Apertus' xIELU)."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str | nn.Module,
                 bias: bool = True, fc1: Linear | None = None, fc2: Linear | None = None,
                 names: tuple[str, str] = ("fc1", "fc2")):
        super().__init__()
        self.act_fn = activation if isinstance(activation, nn.Module) else None
        self.activation = None if self.act_fn is not None else activation
        self.names = names
        setattr(self, names[0], fc1 or Linear(hidden_size, intermediate_size, bias))
        setattr(self, names[1], fc2 or Linear(intermediate_size, hidden_size, bias))

    def forward(self, op, x):
        fc1, fc2 = (getattr(self, name) for name in self.names)
        h = fc1(op, x)
        act = (self.act_fn(op, h) if self.act_fn is not None
               else apply_activation(op, h, self.activation))
        return fc2(op, act)
