"""Gated, grouped RMSNorm (Mamba2's ``norm``): rms_norm(y * silu(z)) * w per group.

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
    def __init__(self, size: int, groups: int = 1, eps: float = 1e-6):
        super().__init__()
        self.size, self.groups, self.eps = size, groups, eps
        self.weight = Weight([size])

    def forward(self, op, y, gate):
        """y, gate [batch, seq, size] -> [batch, seq, size] in the build dtype."""
        y, gate = op.Cast(y, to=FLOAT), op.Cast(gate, to=FLOAT)
        y = op.Mul(y, op.Mul(gate, op.Sigmoid(gate)))
        group_shape = [0, 0, self.groups, self.size // self.groups]
        grouped = op.Reshape(y, op.Constant(value_ints=group_shape))
        variance = op.ReduceMean(op.Mul(grouped, grouped), op.Constant(value_ints=[-1]))
        eps = op.Constant(value=ir.tensor(np.array(self.eps, dtype=np.float32)))
        grouped = op.Div(grouped, op.Sqrt(op.Add(variance, eps)))
        y = op.Reshape(grouped, op.Constant(value_ints=[0, 0, self.size]))
        return op.Cast(op.Mul(y, op.Cast(self.weight, to=FLOAT)), to=get_build_dtype())
