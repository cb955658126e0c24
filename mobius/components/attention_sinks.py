"""Attention with per-head sink logits (gpt-oss), in standard ONNX.

Each head h has one learned logit ``sink[h]`` that joins the softmax and is
then dropped, so it only adds to the denominator:

    out_i = sum_j exp(s_ij) v_j / (exp(sink[h]) + sum_j exp(s_ij)),   s = q.k * scale + mask

The standard Attention op has no such input, so the sink is one more key: an
all-zero key (q.k = 0) with an all-zero value, appended after the cached keys,
whose additive mask entry is ``sink[h]``. The KV cache holds only the real
keys (present = Concat(past, new)). The zero key and the sink column are
shaped by broadcasting (a slice of k / of the mask times 0; both are finite),
not by Shape ops, which some EPs cannot take. com.microsoft GroupQueryAttention takes
the same sinks as its ``head_sink`` input (mobius/rewrite/group_query_attention.py
recognizes this form; mobius/contrib/group_query_attention.py uses it as the body).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir


def sink_attention(op, q, k, v, mask, past_key, past_value, sinks, num_heads: int,
                   scale: float, dtype: ir.DataType):
    """q [B, H, S, D], k/v [B, KV, S, D], mask [B, 1, S, T] (additive), sinks [H], in ``dtype``.

    Returns (y [B, H, S, D], present_key, present_value), presents [B, KV, T, D].
    """
    present_key = op.Concat(past_key, k, axis=2)
    present_value = op.Concat(past_value, v, axis=2)
    zero = _scalar(op, 0.0, dtype)
    first = [op.Constant(value_ints=[0]), op.Constant(value_ints=[1])]
    zero_slot = op.Mul(op.Slice(k, *first, op.Constant(value_ints=[2])), zero)  # [B, KV, 1, D]
    keys = op.Concat(present_key, zero_slot, axis=2)
    values = op.Concat(present_value, zero_slot, axis=2)
    per_head = op.Expand(mask, op.Constant(value_ints=[1, num_heads, 1, 1]))  # [B, H, S, T]
    sinks = op.Reshape(sinks, op.Constant(value_ints=[1, num_heads, 1, 1]))
    sink_column = op.Add(op.Mul(op.Slice(mask, *first, op.Constant(value_ints=[3])), zero),
                         sinks)  # [B, H, S, 1]
    full_mask = op.Concat(per_head, sink_column, axis=-1)
    y = op.Attention(q, keys, values, full_mask, is_causal=0, scale=float(scale))
    return y, present_key, present_value


def _scalar(op, value: float, dtype: ir.DataType):
    return op.Constant(value=ir.tensor(np.array(value, dtype=dtype.numpy())))
