"""Gated short convolution with a carried state (LFM2's conv layers), in standard ONNX.

    B, C, x = split(in_proj(h) ^T)          [batch, channels, seq] each
    window  = concat(past_state, B * x)     [batch, channels, width + seq]
    y       = out_proj((C * depthwise_conv(window)) ^T)
    present = the ``width`` columns of window ending at the chunk's last real token

``width`` = kernel - 1: the state is the gated input of the last kernel - 1
real positions, zeros before the first token, so a prefill and any split of
it into cached steps give the same output. The convolution is the standard
``Conv`` op (one group per channel, no padding): the window already holds
the left context. ``h`` of a padding position is zeroed first (``keep``), as
transformers does, so padding enters the state only through the biases.

Padding. The state must end at a row's last real token, wherever the
padding is: transformers left-pads (the last token is real: the window's
last columns), onnxruntime-genai right-pads a batch and appends generated
tokens after the padding. Taking the columns up to the last position whose
``attention_mask`` is 1 (a chunk without any keeps the past state) makes
both exact; a decode step's token is always real, so it moves by one.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components.conv import Conv1d
from mobius.components.linear import Linear


class ShortConv(nn.Module):
    def __init__(self, hidden_size: int, kernel_size: int, bias: bool):
        super().__init__()
        self.hidden_size, self.kernel_size = hidden_size, kernel_size
        self.in_proj = Linear(hidden_size, 3 * hidden_size, bias)
        self.out_proj = Linear(hidden_size, hidden_size, bias)
        # depthwise: the checkpoint's conv.weight [channels, 1, kernel] is ONNX Conv's layout
        self.conv = Conv1d(hidden_size, hidden_size, kernel_size, bias=bias, groups=hidden_size)

    @property
    def state_shape(self) -> tuple[int, int]:
        """Per batch row: [channels, kernel - 1]."""
        return self.hidden_size, self.kernel_size - 1

    def forward(self, op, hidden, chunk, past_state):
        """hidden [batch, seq, hidden]; chunk: :func:`chunk_inputs`; past_state [batch,
        hidden, kernel - 1]. Returns (output, present_state)."""
        keep, tail = chunk
        projected = op.Transpose(self.in_proj(op, op.Mul(hidden, keep)), perm=[0, 2, 1])
        b, c, x = op.Split(projected, num_outputs=3, axis=1, _outputs=3)
        window = op.Concat(past_state, op.Mul(b, x), axis=2)
        present = op.GatherElements(window, op.Expand(tail, op.Shape(past_state)), axis=2)
        y = op.Mul(c, self.conv(op, window))
        out = self.out_proj(op, op.Transpose(y, perm=[0, 2, 1]))
        if hidden.shape is not None:  # the window's width + seq columns give seq outputs
            out.shape = hidden.shape.copy()
        return out, present



def chunk_inputs(op, chunk_mask, dtype, width: int):
    """What every conv layer reads of the chunk's ``attention_mask`` [batch, seq] (int64):
    keep [batch, seq, 1] in ``dtype``, and tail [batch, 1, width], the window columns of
    the present state (those ending at the last real token; see the module docstring)."""
    keep = op.Unsqueeze(op.Cast(chunk_mask, to=dtype), op.Constant(value_ints=[2]))
    one = op.Constant(value_int=1)
    slots = op.Range(one, op.Add(op.Squeeze(op.Shape(chunk_mask, start=1, end=2)), one), one)
    last = op.ReduceMax(op.Mul(chunk_mask, slots), op.Constant(value_ints=[1]), keepdims=1)
    tail = op.Add(last, op.Constant(value_ints=list(range(width))))  # [batch, width]
    return keep, op.Unsqueeze(tail, op.Constant(value_ints=[1]))
