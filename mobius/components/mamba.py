"""Mamba (v1) mixer: in_proj -> causal conv + activation -> x_proj -> selective scan -> out_proj.

in_proj makes, per token, x and the gate z [intermediate each]. x runs through a
depthwise causal convolution (state carried, mobius/components/causal_conv_state.py)
and the activation (transformers' hidden_act); x_proj turns it into dt_rank
time-step features, B and C [state_size each]; dt_proj lifts the time step to one
per channel, dt = softplus(dt_proj(.)). The scan (mobius/components/selective_scan.py)
runs in float32 with A = -exp(A_log) [intermediate, state_size], plus the skip D * x;
the output is gated by SiLU(z) and projected back. Jamba's mixer also RMS-normalizes
the time-step features, B and C after x_proj (``inner_norm_eps``).

Padding, as for Mamba2 (mobius/components/mamba2.py): the layer input and the conv
output are multiplied by the 0/1 mask of the current positions, and dt is 0 at
padding, so a padded position leaves the state as it was, on left- and right-padded
rows alike.

State tensors: conv [batch, intermediate, conv_kernel - 1] and recurrent
[batch, intermediate, state_size], in the build dtype.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.causal_conv_state import causal_conv_with_state, depthwise_causal_conv
from mobius.components.linear import Linear
from mobius.components.recurrent_shapes import restate_shapes
from mobius.components.rms_norm import RMSNorm
from mobius.components.selective_scan import selective_scan
from mobius.components.weight import Weight
from mobius.context import get_build_dtype

FLOAT = ir.DataType.FLOAT


@dataclasses.dataclass(frozen=True)
class MambaDims:
    hidden: int
    intermediate: int
    state_size: int
    conv_kernel: int
    time_step_rank: int
    #: positions per chunk of the prefill's closed-form scan: the memory is
    #: seq x (chunk + seq / chunk^2) x intermediate x state_size floats, least near
    #: chunk = cbrt(seq); 8 suits prompts of hundreds of tokens (a 10-token prefill: 2 chunks)
    chunk_size: int = 8

    def state_dims(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The carried tensors after the batch axis, by genai's name suffix."""
        return (("conv_state", (self.intermediate, self.conv_kernel - 1)),
                ("recurrent_state", (self.intermediate, self.state_size)))


class MambaMixer(nn.Module):
    def __init__(self, dims: MambaDims, *, proj_bias: bool = False, conv_bias: bool = True,
                 activation: str = "silu", inner_norm_eps: float | None = None):
        """proj_bias: in_proj's and out_proj's; activation: the conv's (hidden_act);
        inner_norm_eps: RMSNorms dt_layernorm, b_layernorm, c_layernorm after x_proj (Jamba)."""
        super().__init__()
        self.dims, self.activation = dims, activation
        inner, size = dims.intermediate, dims.state_size
        self.in_proj = Linear(dims.hidden, 2 * inner, proj_bias)
        self.conv1d = depthwise_causal_conv(inner, dims.conv_kernel, conv_bias)
        self.x_proj = Linear(inner, dims.time_step_rank + 2 * size, False)
        self.dt_proj = Linear(dims.time_step_rank, inner, True)
        self.A_log = Weight([inner, size])
        self.D = Weight([inner])
        self.out_proj = Linear(inner, dims.hidden, proj_bias)
        self.dt_layernorm = self.b_layernorm = self.c_layernorm = None
        if inner_norm_eps is not None:
            self.dt_layernorm = RMSNorm(dims.time_step_rank, inner_norm_eps)
            self.b_layernorm = RMSNorm(size, inner_norm_eps)
            self.c_layernorm = RMSNorm(size, inner_norm_eps)

    def forward(self, op, hidden, padding, past_conv, past_state):
        """hidden [batch, seq, hidden], padding [batch, seq, 1] (1 real, 0 padding) ->
        (output [batch, seq, hidden], present conv, present recurrent state)."""
        d = self.dims
        x, gate = op.Split(self.in_proj(op, op.Mul(hidden, padding)), num_outputs=2, axis=-1,
                           _outputs=2)
        x, present_conv = causal_conv_with_state(op, self.conv1d, x, past_conv, padding)
        x = op.Mul(apply_activation(op, x, self.activation), padding)
        rank, b, c = op.Split(self.x_proj(op, x),
                              op.Constant(value_ints=[d.time_step_rank, d.state_size,
                                                      d.state_size]), axis=-1, _outputs=3)
        if self.dt_layernorm is not None:
            rank, b, c = (norm(op, t) for norm, t in ((self.dt_layernorm, rank),
                                                      (self.b_layernorm, b), (self.c_layernorm, c)))
        real = op.Cast(padding, to=FLOAT)
        dt = op.Mul(op.Softplus(op.Cast(self.dt_proj(op, rank), to=FLOAT)), real)
        a = op.Neg(op.Exp(op.Cast(self.A_log, to=FLOAT)))
        x = op.Cast(x, to=FLOAT)
        y, state = selective_scan(op, x, dt, a, op.Cast(b, to=FLOAT), op.Cast(c, to=FLOAT),
                                  op.Cast(past_state, to=FLOAT), d.chunk_size)
        y = op.Add(y, op.Mul(x, op.Cast(self.D, to=FLOAT)))
        gate = op.Cast(gate, to=FLOAT)
        y = op.Cast(op.Mul(y, op.Mul(gate, op.Sigmoid(gate))), to=get_build_dtype())
        out = self.out_proj(op, y)
        present_state = op.Cast(state, to=get_build_dtype())
        restate_shapes((out, hidden), (present_conv, past_conv), (present_state, past_state))
        return out, present_conv, present_state
