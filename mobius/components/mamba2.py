"""Mamba2 mixer: in_proj -> causal conv + SiLU -> selective scan -> gated RMSNorm -> out_proj.

in_proj makes, per token, the gate z [intermediate], the conv input
xBC [intermediate + 2 * groups * state_size] and dt [heads]. xBC runs through a
depthwise causal convolution (state carried, mobius/components/causal_conv_state.py)
and the activation (SiLU), then splits into x (heads x head_dim), B and C
(groups x state_size, each group shared by heads / groups heads). The scan
(mobius/components/ssd_scan.py) runs in float32 with A = -exp(A_log),
dt = softplus(dt + dt_bias), plus the skip D * x.

Padding (transformers' ``apply_mask_to_padding_states``): the layer input and the
conv output are multiplied by the 0/1 mask of the current positions, so a padded
position feeds zeros into the conv and adds nothing to the state. Beyond
transformers (which left-pads, so its padding precedes a zero state), dt is 0
at padding too, so the state passes a padded position unchanged and the conv
state ends at each row's last real token: onnxruntime-genai's right-padded
prompts then carry the same state as unpadded ones.

``time_step_limit`` (lo, hi) clamps dt after the softplus in multi-token forwards
only, as transformers' chunked scan does (its one-token recurrent step does not
clamp): the graph clamps when the call has more than one position.

State tensors (onnxruntime-genai's recurrent-state layout): conv
[batch, intermediate + 2 * groups * state_size, conv_kernel - 1] and recurrent
[batch, heads, head_dim, state_size], in the build dtype.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.causal_conv_state import causal_conv_with_state, depthwise_causal_conv
from mobius.components.gated_rms_norm import GatedRMSNorm
from mobius.components.linear import Linear
from mobius.components.recurrent_shapes import restate_shapes
from mobius.components.ssd_scan import ssd_scan
from mobius.components.weight import Weight
from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype

FLOAT = ir.DataType.FLOAT


@dataclasses.dataclass(frozen=True)
class Mamba2Dims:
    hidden: int
    heads: int
    head_dim: int
    groups: int
    state_size: int
    conv_kernel: int
    chunk_size: int

    @property
    def intermediate(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.intermediate + 2 * self.groups * self.state_size

    def state_dims(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The carried tensors after the batch axis, by genai's name suffix."""
        return (("conv_state", (self.conv_dim, self.conv_kernel - 1)),
                ("recurrent_state", (self.heads, self.head_dim, self.state_size)))


class Mamba2Mixer(nn.Module):
    def __init__(self, dims: Mamba2Dims, *, proj_bias: bool = False, conv_bias: bool = True,
                 eps: float = 1e-6, activation: str = "silu",
                 time_step_limit: tuple[float, float] = (0.0, math.inf),
                 out_bias: bool | None = None, norm: str | None = "gate_first",
                 in_multipliers: tuple[float, ...] | None = None):
        """activation: the conv's (transformers' hidden_act); the norm's gate is always SiLU.
        out_bias: out_proj's bias (default proj_bias); norm: "gate_first" (rms_norm(y *
        silu(z))), "norm_first" (rms_norm(y) * silu(z)) or None (y * silu(z), no weight);
        in_multipliers: (z, x, B, C, dt) scales of in_proj's output (Falcon-H1's mup)."""
        super().__init__()
        self.dims, self.activation, self.time_step_limit = dims, activation, time_step_limit
        self.in_multipliers = in_multipliers
        self.in_proj = Linear(dims.hidden, dims.intermediate + dims.conv_dim + dims.heads,
                              proj_bias)
        self.conv1d = depthwise_causal_conv(dims.conv_dim, dims.conv_kernel, conv_bias)
        self.dt_bias = Weight([dims.heads])
        self.A_log = Weight([dims.heads])
        self.D = Weight([dims.heads])
        self.norm = None if norm is None else GatedRMSNorm(
            dims.intermediate, dims.groups, eps, gate_first=norm == "gate_first")
        self.out_proj = Linear(dims.intermediate, dims.hidden,
                               proj_bias if out_bias is None else out_bias)

    def forward(self, op, hidden, padding, past_conv, past_state):
        """hidden [batch, seq, hidden], padding [batch, seq, 1] (1 real, 0 padding) ->
        (output [batch, seq, hidden], present conv, present recurrent state)."""
        d = self.dims
        inner, groups_n = d.intermediate, d.groups * d.state_size
        gate, xbc, dt = op.Split(self._projected(op, op.Mul(hidden, padding)),
                                 op.Constant(value_ints=[inner, d.conv_dim, d.heads]),
                                 axis=-1, _outputs=3)
        xbc, present_conv = causal_conv_with_state(op, self.conv1d, xbc, past_conv, padding)
        real = op.Cast(padding, to=FLOAT)
        xbc = op.Mul(op.Cast(apply_activation(op, xbc, self.activation), to=FLOAT), real)
        x, b, c = op.Split(xbc, op.Constant(value_ints=[inner, groups_n, groups_n]),
                           axis=-1, _outputs=3)
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, d.heads, d.head_dim]))
        b, c = (self._per_head(op, t) for t in (b, c))
        dt = self._limited(op, op.Softplus(op.Add(op.Cast(dt, to=FLOAT),
                                                  op.Cast(self.dt_bias, to=FLOAT))))
        dt = op.Mul(dt, real)  # padding keeps the state
        a = op.Neg(op.Exp(op.Cast(self.A_log, to=FLOAT)))
        y, state = ssd_scan(op, x, dt, a, b, c, op.Cast(past_state, to=FLOAT),
                            (d.heads, d.head_dim, d.state_size), d.chunk_size)
        y = op.Add(y, op.Mul(x, op.Unsqueeze(op.Cast(self.D, to=FLOAT),
                                             op.Constant(value_ints=[-1]))))
        y = op.Reshape(y, op.Constant(value_ints=[0, 0, inner]))
        out = self.out_proj(op, self._gated(op, y, gate))
        present_state = op.Cast(state, to=get_build_dtype())
        restate_shapes((out, hidden), (present_conv, past_conv), (present_state, past_state))
        return out, present_conv, present_state

    def _projected(self, op, hidden):
        """in_proj, each of its (z, x, B, C, dt) sections scaled by in_multipliers."""
        projected = self.in_proj(op, hidden)
        if self.in_multipliers is None or set(self.in_multipliers) == {1.0}:
            return projected
        d = self.dims
        sizes = (d.intermediate, d.intermediate, d.groups * d.state_size,
                 d.groups * d.state_size, d.heads)
        scales = np.concatenate([np.full(n, m) for n, m in zip(sizes, self.in_multipliers)])
        value = ir.tensor(scales.astype(numpy_dtype(get_build_dtype())))
        return op.Mul(projected, op.Constant(value=value))

    def _gated(self, op, y, gate):
        if self.norm is not None:
            return self.norm(op, y, gate)
        gate = op.Cast(gate, to=FLOAT)
        return op.Cast(op.Mul(y, op.Mul(gate, op.Sigmoid(gate))), to=get_build_dtype())

    def _limited(self, op, dt):
        """dt clamped to time_step_limit when the call has more than one position."""
        lo, hi = self.time_step_limit
        if lo <= 0.0 and hi == math.inf:  # softplus is positive: nothing to clamp
            return dt
        clamped = dt
        if lo > 0.0:
            clamped = op.Max(clamped, op.Constant(value=ir.tensor(np.array(lo, np.float32))))
        if hi < math.inf:
            clamped = op.Min(clamped, op.Constant(value=ir.tensor(np.array(hi, np.float32))))
        multi = op.Greater(op.Shape(dt, start=1, end=2), op.Constant(value_ints=[1]))
        return op.Where(multi, clamped, dt)

    def _per_head(self, op, t):
        """[batch, seq, groups * state_size] -> [batch, seq, heads, state_size]."""
        d = self.dims
        t = op.Reshape(t, op.Constant(value_ints=[0, 0, d.groups, d.state_size]))
        group_of_head = np.arange(d.heads, dtype=np.int64) // (d.heads // d.groups)
        return op.Gather(t, op.Constant(value=ir.tensor(group_of_head)), axis=2)
