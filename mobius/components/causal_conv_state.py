"""Depthwise causal 1-D convolution whose last ``kernel - 1`` inputs are a carried state.

Mamba2's (and other hybrids') short convolution over [batch, seq, channels]:
the previous call's trailing inputs ``past`` [batch, channels, kernel - 1]
(zeros before the first call) are prepended, an unpadded depthwise ``Conv``
gives one output per new position, and the ``kernel - 1`` inputs up to each
row's last real position are the next call's state. One graph serves prefill
and decode; a prefill from a zero state equals a zero-padded causal convolution.

Padding: transformers left-pads, so a row's last real position is the last
one; onnxruntime-genai right-pads a batch of prompts, so a short row's state
must end before its padding. With ``padding`` (the current positions' 0/1 mask)
the state is gathered at each row's last real position, which is right for both.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.components.conv import Conv1d

INT64_MAX = 2**63 - 1


def depthwise_causal_conv(channels: int, kernel_size: int, bias: bool) -> Conv1d:
    """The convolution's weights in PyTorch's layout: weight [channels, 1, kernel], bias."""
    return Conv1d(channels, channels, kernel_size, bias=bias, groups=channels)


def causal_conv_with_state(op, conv: Conv1d, x, past, padding=None):
    """x [batch, seq, channels], past [batch, channels, kernel - 1], padding [batch, seq, 1]
    -> (conv output [batch, seq, channels], present [batch, channels, kernel - 1])."""
    window = op.Concat(past, op.Transpose(x, perm=[0, 2, 1]), axis=2)
    y = op.Transpose(conv(op, window), perm=[0, 2, 1])
    if padding is None:
        present = op.Slice(window, op.Constant(value_ints=[1 - conv.kernel_size]),
                           op.Constant(value_ints=[INT64_MAX]), op.Constant(value_ints=[2]))
        return y, present
    return y, _state_at_last_real(op, window, past, padding, conv.kernel_size - 1)


def _state_at_last_real(op, window, past, padding, width: int):
    """window[b, :, e_b : e_b + width], e_b = 1 + the row's last real position (0: none)."""
    real = op.Cast(op.Squeeze(padding, op.Constant(value_ints=[2])), to=ir.DataType.INT64)
    seq = op.Squeeze(op.Shape(padding, start=1, end=2))
    one = op.Constant(value_int=1)
    slots = op.Range(one, op.Add(seq, one), one)  # 1..seq
    ends = op.ReduceMax(op.Mul(real, slots), op.Constant(value_ints=[1]), keepdims=1)  # [b, 1]
    offsets = op.Range(op.Constant(value_int=0), op.Constant(value_int=width), one)
    index = op.Add(op.Unsqueeze(ends, op.Constant(value_ints=[2])), offsets)  # [b, 1, width]
    return op.GatherElements(window, op.Expand(index, op.Shape(past)), axis=2)
