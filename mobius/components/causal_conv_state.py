"""Depthwise causal 1-D convolution whose last ``kernel - 1`` inputs are a carried state.

Mamba2's (and other hybrids') short convolution over [batch, seq, channels]:
the previous call's trailing inputs ``past`` [batch, channels, kernel - 1]
(zeros before the first call) are prepended, an unpadded depthwise ``Conv``
gives one output per new position, and the trailing ``kernel - 1`` inputs of
the concatenation are the next call's state. One graph serves prefill and
decode; a prefill from a zero state equals a zero-padded causal convolution.
"""

from __future__ import annotations

from mobius.components.conv import Conv1d

INT64_MAX = 2**63 - 1


def depthwise_causal_conv(channels: int, kernel_size: int, bias: bool) -> Conv1d:
    """The convolution's weights in PyTorch's layout: weight [channels, 1, kernel], bias."""
    return Conv1d(channels, channels, kernel_size, bias=bias, groups=channels)


def causal_conv_with_state(op, conv: Conv1d, x, past):
    """x [batch, seq, channels], past [batch, channels, kernel - 1] ->
    (conv output [batch, seq, channels], present [batch, channels, kernel - 1])."""
    window = op.Concat(past, op.Transpose(x, perm=[0, 2, 1]), axis=2)
    present = op.Slice(window, op.Constant(value_ints=[1 - conv.kernel_size]),
                       op.Constant(value_ints=[INT64_MAX]), op.Constant(value_ints=[2]))
    return op.Transpose(conv(op, window), perm=[0, 2, 1]), present
