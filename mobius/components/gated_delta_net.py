"""Gated DeltaNet: the linear-attention layer of Qwen3-Next and Qwen 3.5.

in_proj_qkvz makes, per token, queries and keys (key heads x k_dim), values and
the output gate z (value heads x v_dim); in_proj_ba the rate b and the decay
input a (one per value head). Qwen3-Next's checkpoint interleaves them per key head
([q, k, v, z] of each key-head group, then [b, a]); the rows are reordered when
the weights load, so the graph splits contiguous blocks. Qwen 3.5 stores them
unfused and in that order already (``fused_projections=False``: in_proj_qkv,
in_proj_z, in_proj_b, in_proj_a). q, k, v run through a
depthwise causal convolution (no bias, state carried:
mobius/components/causal_conv_state.py) and the activation; q and k are
L2-normalized, q scaled by k_dim^-0.5, and each key head serves
value heads / key heads consecutive value heads. The recurrence
(mobius/components/gated_delta_rule.py) runs in float32 with
beta = sigmoid(b) and g = -exp(A_log) * softplus(a + dt_bias); its output is
RMS-normalized per value head (weight [v_dim], before the gate), times silu(z),
then out_proj.

Padding: the layer input is multiplied by the 0/1 mask of the current positions
(as transformers does), and beta and g are 0 at padding, so a padded position
leaves the state as it is and the conv state ends at each row's last real token:
right-padded prompts (onnxruntime-genai) carry the state of unpadded ones.

State tensors (onnxruntime-genai's recurrent-state layout, build dtype): conv
[batch, 2 * key heads * k_dim + value heads * v_dim, conv_kernel - 1] and
recurrent [batch, value heads, k_dim, v_dim].
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.causal_conv_state import causal_conv_with_state, depthwise_causal_conv
from mobius.components.gated_delta_rule import gated_delta_rule
from mobius.components.linear import Linear
from mobius.components.recurrent_shapes import restate_shapes
from mobius.components.weight import Weight, transpose
from mobius.context import get_build_dtype

FLOAT = ir.DataType.FLOAT
L2_EPS = 1e-6  # transformers' (and the FLA kernels') l2norm epsilon


@dataclasses.dataclass(frozen=True)
class DeltaNetDims:
    hidden: int
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int
    chunk_size: int = 64

    @property
    def keys(self) -> int:
        return self.key_heads * self.key_dim

    @property
    def values(self) -> int:
        return self.value_heads * self.value_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.keys + self.values

    def state_dims(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The carried tensors after the batch axis, by genai's name suffix."""
        return (("conv_state", (self.conv_dim, self.conv_kernel - 1)),
                ("recurrent_state", (self.value_heads, self.key_dim, self.value_dim)))

    def qkvz_rows(self) -> np.ndarray:
        """Checkpoint rows of in_proj_qkvz in the order [q all, k all, v all, z all]."""
        per = self.value_heads // self.key_heads * self.value_dim
        group = 2 * self.key_dim + 2 * per
        sizes = (self.key_dim, self.key_dim, per, per)
        starts = np.cumsum((0,) + sizes[:-1])
        return np.concatenate([h * group + start + np.arange(size)
                               for start, size in zip(starts, sizes)
                               for h in range(self.key_heads)])

    def ba_rows(self) -> np.ndarray:
        """Checkpoint rows of in_proj_ba in the order [b all, a all]."""
        per = self.value_heads // self.key_heads
        return np.concatenate([h * 2 * per + start + np.arange(per)
                               for start in (0, per) for h in range(self.key_heads)])


def _reordered(in_features: int, rows: np.ndarray) -> Linear:
    """A bias-free Linear whose checkpoint output rows are read in the order ``rows``."""
    linear = Linear(in_features, len(rows))
    linear.weight = Weight([in_features, len(rows)], checkpoint_shape=[len(rows), in_features],
                           transform=lambda a: transpose(np.ascontiguousarray(a[rows])))
    return linear


class HeadRMSNorm(nn.Module):
    """RMSNorm over each head's v_dim (weight [v_dim]), in float32."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = Weight([size])

    def forward(self, op, y):
        return op.RMSNormalization(y, op.Cast(self.weight, to=FLOAT), axis=-1,
                                   epsilon=self.eps, stash_type=1)


class GatedDeltaNet(nn.Module):
    def __init__(self, dims: DeltaNetDims, *, eps: float = 1e-6, activation: str = "silu",
                 fused_projections: bool = True):
        """activation: the conv's (transformers' hidden_act); the output gate is always SiLU.
        fused_projections: Qwen3-Next's interleaved in_proj_qkvz / in_proj_ba, else
        Qwen 3.5's in_proj_qkv / in_proj_z / in_proj_b / in_proj_a."""
        super().__init__()
        if dims.value_heads % dims.key_heads:
            raise ValueError(f"{dims.value_heads} value heads do not group into "
                             f"{dims.key_heads} key heads")
        self.dims, self.eps, self.activation = dims, eps, activation
        self.fused_projections = fused_projections
        if fused_projections:
            self.in_proj_qkvz = _reordered(dims.hidden, dims.qkvz_rows())
            self.in_proj_ba = _reordered(dims.hidden, dims.ba_rows())
        else:
            self.in_proj_qkv = Linear(dims.hidden, dims.conv_dim)
            self.in_proj_z = Linear(dims.hidden, dims.values)
            self.in_proj_b = Linear(dims.hidden, dims.value_heads)
            self.in_proj_a = Linear(dims.hidden, dims.value_heads)
        self.conv1d = depthwise_causal_conv(dims.conv_dim, dims.conv_kernel, bias=False)
        self.dt_bias = Weight([dims.value_heads])
        self.A_log = Weight([dims.value_heads])
        self.norm = HeadRMSNorm(dims.value_dim, eps)
        self.out_proj = Linear(dims.values, dims.hidden)

    def forward(self, op, hidden, padding, past_conv, past_state):
        """hidden [batch, seq, hidden], padding [batch, seq, 1] (1 real, 0 padding) ->
        (output [batch, seq, hidden], present conv, present recurrent state)."""
        d = self.dims
        hidden_in = op.Mul(hidden, padding)
        mixed, z, rate, decay_in = self._projections(op, hidden_in)
        mixed, present_conv = causal_conv_with_state(op, self.conv1d, mixed, past_conv, padding)
        mixed = op.Cast(apply_activation(op, mixed, self.activation), to=FLOAT)
        q, k, v = op.Split(mixed, op.Constant(value_ints=[d.keys, d.keys, d.values]),
                           axis=-1, _outputs=3)
        q = op.Mul(self._key_heads(op, q), op.Constant(value_float=d.key_dim ** -0.5))
        k = self._key_heads(op, k)
        v = op.Reshape(v, op.Constant(value_ints=[0, 0, d.value_heads, d.value_dim]))
        real = op.Cast(padding, to=FLOAT)  # [batch, seq, 1]
        beta = op.Mul(op.Sigmoid(rate), real)
        g = op.Mul(op.Neg(op.Exp(op.Cast(self.A_log, to=FLOAT))),
                   op.Softplus(op.Add(decay_in, op.Cast(self.dt_bias, to=FLOAT))))
        g = op.Mul(g, real)  # padding keeps the state
        y, state = gated_delta_rule(op, q, k, v, g, beta, op.Cast(past_state, to=FLOAT),
                                    d.chunk_size)
        y = op.Reshape(self.norm(op, y), op.Constant(value_ints=[0, 0, d.values]))
        gate = op.Cast(z, to=FLOAT)
        y = op.Cast(op.Mul(y, op.Mul(gate, op.Sigmoid(gate))), to=get_build_dtype())
        out = self.out_proj(op, y)
        present_state = op.Cast(state, to=get_build_dtype())
        restate_shapes((out, hidden), (present_conv, past_conv), (present_state, past_state))
        return out, present_conv, present_state

    def _projections(self, op, hidden_in):
        """(q|k|v, z, b, a); b and a in float32."""
        d = self.dims
        if not self.fused_projections:
            return (self.in_proj_qkv(op, hidden_in), self.in_proj_z(op, hidden_in),
                    op.Cast(self.in_proj_b(op, hidden_in), to=FLOAT),
                    op.Cast(self.in_proj_a(op, hidden_in), to=FLOAT))
        mixed, z = op.Split(self.in_proj_qkvz(op, hidden_in),
                            op.Constant(value_ints=[d.conv_dim, d.values]), axis=-1, _outputs=2)
        rate, decay_in = op.Split(op.Cast(self.in_proj_ba(op, hidden_in), to=FLOAT),
                                  op.Constant(value_ints=[d.value_heads, d.value_heads]),
                                  axis=-1, _outputs=2)
        return mixed, z, rate, decay_in

    def _key_heads(self, op, t):
        """[batch, seq, key heads * k_dim] -> L2-normalized [batch, seq, value heads, k_dim]."""
        d = self.dims
        t = op.Reshape(t, op.Constant(value_ints=[0, 0, d.key_heads, d.key_dim]))
        norm = op.ReduceSum(op.Mul(t, t), op.Constant(value_ints=[-1]), keepdims=1)
        t = op.Div(t, op.Sqrt(op.Add(norm, op.Constant(value_float=L2_EPS))))
        if d.value_heads == d.key_heads:
            return t
        key_of_value = np.arange(d.value_heads, dtype=np.int64) // (d.value_heads // d.key_heads)
        return op.Gather(t, op.Constant(value=ir.tensor(key_of_value)), axis=2)
