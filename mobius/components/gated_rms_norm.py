"""Gated, grouped RMSNorm (Mamba2's ``norm``): rms_norm(y * silu(z)) * w per group.

``gate_first=False`` gates after the norm, rms_norm(y) * w * silu(z) (Falcon-H1's
``mamba_norm_before_gate``).

The features split into ``groups`` equal groups, each normalized on its own;
computed in float32 whatever the build dtype, as transformers does.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.weight import Weight
from mobius.context import get_build_dtype

FLOAT = ir.DataType.FLOAT


class GatedRMSNorm(nn.Module):
    def __init__(self, size: int, groups: int = 1, eps: float = 1e-6, gate_first: bool = True):
        super().__init__()
        self.size, self.groups, self.eps, self.gate_first = size, groups, eps, gate_first
        self.weight = Weight([size])

    def forward(self, op, y, gate):
        """y, gate [batch, seq, size] -> [batch, seq, size] in the build dtype."""
        y, gate = op.Cast(y, to=FLOAT), op.Cast(gate, to=FLOAT)
        silu = op.Mul(gate, op.Sigmoid(gate))
        if self.gate_first:
            y = op.Mul(y, silu)
        group_shape = [0, 0, self.groups, self.size // self.groups]
        grouped = op.Reshape(y, op.Constant(value_ints=group_shape))
        variance = op.ReduceMean(op.Mul(grouped, grouped), op.Constant(value_ints=[-1]))
        eps = op.Constant(value=ir.tensor(np.array(self.eps, dtype=np.float32)))
        grouped = op.Div(grouped, op.Sqrt(op.Add(variance, eps)))
        y = op.Reshape(grouped, op.Constant(value_ints=[0, 0, self.size]))
        y = op.Mul(y, op.Cast(self.weight, to=FLOAT))
        return op.Cast(y if self.gate_first else op.Mul(y, silu), to=get_build_dtype())
