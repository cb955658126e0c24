"""Mamba2's selective state-space scan, in closed form over chunks (no loop op).

For each head h with state S [head_dim, state_size]::

    S_t = exp(dt_t * A) * S_{t-1} + dt_t * x_t (outer) B_t,    y_t = S_t @ C_t

The sequence is cut into chunks of Q = min(seq, chunk_size) positions (the
last one zero-padded, which adds nothing: padded steps have dt = 0). Inside a
chunk the recurrence unrolls into a masked, decayed product
``(C B^T * exp(segsum(dt A))) @ (dt x)``; the state entering each chunk comes
from a second such product over the chunks' end states, seeded by the carried
state. This is the chunked "state space duality" form transformers computes in
``mamba2_chunk_scan`` (same chunking), in standard ops: the memory is
O(seq * Q) per head, and a one-token decode step (Q = 1) is exactly the
single-step recurrence.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

INT64_MAX = 2**63 - 1


def _ints(op, *values):
    return op.Constant(value_ints=list(values))


def _decay(op, steps, axis_len):
    """steps [..., n] -> exp(sum_{j < k <= i} steps_k) [..., n, n] for i >= j, else 0."""
    index = op.Range(op.Constant(value_int=0), op.Squeeze(axis_len), op.Constant(value_int=1))
    rows = op.Unsqueeze(index, _ints(op, 1))  # [n, 1]
    zero = op.Constant(value=ir.tensor(np.array(0.0, dtype=np.float32)))
    below = op.Where(op.Greater(rows, index), op.Unsqueeze(steps, _ints(op, -1)), zero)
    summed = op.CumSum(below, op.Constant(value_int=-2))
    return op.Where(op.GreaterOrEqual(rows, index), op.Exp(summed), zero)


def _last(op, x, axis: int):
    return op.Slice(x, _ints(op, -1), _ints(op, INT64_MAX), _ints(op, axis))


def ssd_scan(op, x, dt, a, b, c, state, dims: tuple[int, int, int], chunk_size: int):
    """float32 x [batch, seq, heads, head_dim], dt [batch, seq, heads], a [heads],
    b, c [batch, seq, heads, state_size], state [batch, heads, head_dim, state_size];
    dims = (heads, head_dim, state_size) -> (y [batch, seq, heads, head_dim], final state)."""
    heads, head_dim, size = dims
    seq = op.Shape(x, start=1, end=2)
    q = op.Min(seq, _ints(op, chunk_size))
    chunks = op.Div(op.Sub(op.Add(seq, q), _ints(op, 1)), q)
    pads = op.Concat(_ints(op, 0), op.Sub(op.Mul(chunks, q), seq), axis=0)

    def chunked(t, tail, perm):  # pad the sequence, cut it into chunks, heads first
        t = op.Pad(t, pads, None, _ints(op, 1))
        t = op.Reshape(t, op.Concat(_ints(op, 0), chunks, q, _ints(op, *tail), axis=0))
        return op.Transpose(t, perm=perm)

    x_dt = chunked(op.Mul(x, op.Unsqueeze(dt, _ints(op, -1))), (heads, head_dim), [0, 3, 1, 2, 4])
    b, c = (chunked(t, (heads, size), [0, 3, 1, 2, 4]) for t in (b, c))
    steps = chunked(op.Mul(dt, a), (heads,), [0, 3, 1, 2])  # [batch, heads, chunks, q]
    cumulative = op.CumSum(steps, op.Constant(value_int=3))
    within = op.Mul(op.MatMul(c, op.Transpose(b, perm=[0, 1, 2, 4, 3])), _decay(op, steps, q))
    y = op.MatMul(within, x_dt)  # [batch, heads, chunks, q, head_dim]
    to_end = op.Exp(op.Sub(_last(op, cumulative, 3), cumulative))
    ends = op.MatMul(op.Transpose(x_dt, perm=[0, 1, 2, 4, 3]),
                     op.Mul(b, op.Unsqueeze(to_end, _ints(op, -1))))  # [b, h, chunks, p, n]
    ends = op.Concat(op.Unsqueeze(state, _ints(op, 2)), ends, axis=2)
    chunk_steps = op.Pad(op.Squeeze(_last(op, cumulative, 3), _ints(op, 3)),
                         _ints(op, 1, 0), None, _ints(op, 2))  # [batch, heads, chunks + 1]
    flat = op.Reshape(ends, _ints(op, 0, heads, -1, head_dim * size))
    starts = op.MatMul(_decay(op, chunk_steps, op.Add(chunks, _ints(op, 1))), flat)
    final = op.Reshape(_last(op, starts, 2), _ints(op, 0, heads, head_dim, size))
    starts = op.Slice(starts, _ints(op, 0), chunks, _ints(op, 2))
    starts = op.Reshape(starts, _ints(op, 0, heads, -1, head_dim, size))
    carried = op.MatMul(c, op.Transpose(starts, perm=[0, 1, 2, 4, 3]))  # [b, h, chunks, q, p]
    y = op.Add(y, op.Mul(carried, op.Unsqueeze(op.Exp(cumulative), _ints(op, -1))))
    y = op.Reshape(op.Transpose(y, perm=[0, 2, 3, 1, 4]), _ints(op, 0, -1, heads, head_dim))
    return op.Slice(y, _ints(op, 0), seq, _ints(op, 1)), final
