"""Mamba (v1)'s selective scan, in closed form over chunks (no loop op).

For each channel d and state index n, with A [channels, state_size]::

    S_t[d, n] = exp(dt_t[d] * A[d, n]) * S_{t-1}[d, n] + dt_t[d] * x_t[d] * B_t[n]
    y_t[d] = sum_n S_t[d, n] * C_t[n]

Unlike Mamba2 (one scalar decay per head, mobius/components/ssd_scan.py) the decay
differs per (d, n), so every decayed product keeps both axes. The sequence is cut
into chunks of Q = min(seq, chunk_size) positions (the last one zero-padded: padded
steps have dt = 0 and keep the state). Inside a chunk the recurrence unrolls into
``sum_s exp(A * (dt_{s+1} + ... + dt_t)) dt_s x_s B_s``; the state entering each
chunk comes from the same product over the chunks' end states, seeded by the
carried state. Memory: O(seq * Q * channels * state_size) inside chunks plus
O((seq / Q)^2 * channels * state_size) across them; a one-token decode step is
exactly the single-step recurrence.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

INT64_MAX = 2**63 - 1


def _ints(op, *values):
    return op.Constant(value_ints=list(values))


def _decay(op, steps, length, a):
    """steps [..., n, D], a [D, N] -> exp(a * sum_{j < k <= i} steps_k) [..., n(i), n(j), D, N]
    for i >= j, else 0 (the sum of the steps between, never a difference of cumsums)."""
    index = op.Range(op.Constant(value_int=0), op.Squeeze(length), op.Constant(value_int=1))
    rows = op.Unsqueeze(index, _ints(op, 1))  # [n, 1]
    zero = op.Constant(value=ir.tensor(np.array(0.0, dtype=np.float32)))
    later = op.Unsqueeze(op.Greater(rows, index), _ints(op, -1))  # [n(k), n(j), 1]
    below = op.Where(later, op.Unsqueeze(steps, _ints(op, -2)), zero)  # [..., k, j, D]
    summed = op.Unsqueeze(op.CumSum(below, op.Constant(value_int=-3)), _ints(op, -1))
    on_or_below = op.Unsqueeze(op.GreaterOrEqual(rows, index), _ints(op, -1, -2))
    return op.Where(on_or_below, op.Exp(op.Mul(summed, a)), zero)


def selective_scan(op, x, dt, a, b, c, state, chunk_size: int):
    """float32 x, dt [batch, seq, D] (dt after softplus), a [D, N], b, c [batch, seq, N],
    state [batch, D, N] -> (y [batch, seq, D] without the D skip, final state)."""
    seq = op.Shape(x, start=1, end=2)
    q = op.Min(seq, _ints(op, chunk_size))
    chunks = op.Div(op.Sub(op.Add(seq, q), _ints(op, 1)), q)
    pads = op.Concat(_ints(op, 0), op.Sub(op.Mul(chunks, q), seq), axis=0)

    def chunked(t):  # [batch, seq, k] -> [batch, chunks, q, k], zero-padded
        t = op.Reshape(op.Pad(t, pads, None, _ints(op, 1)), op.Concat(
            _ints(op, 0), chunks, q, _ints(op, -1), axis=0))
        return t

    v, dt, b, c = (chunked(t) for t in (op.Mul(dt, x), dt, b, c))
    decay = _decay(op, dt, q, a)  # [batch, chunks, t, s, D, N]
    cb = op.Mul(op.Unsqueeze(c, _ints(op, 3)), op.Unsqueeze(b, _ints(op, 2)))  # [b, ch, t, s, N]
    weights = op.Squeeze(op.MatMul(decay, op.Unsqueeze(cb, _ints(op, -1))), _ints(op, -1))
    y = op.ReduceSum(op.Mul(weights, op.Unsqueeze(v, _ints(op, 2))), _ints(op, 3), keepdims=0)
    to_end = op.Squeeze(op.Slice(decay, _ints(op, -1), _ints(op, INT64_MAX), _ints(op, 2)),
                        _ints(op, 2))  # [batch, chunks, s, D, N]
    inputs = op.Mul(op.Unsqueeze(v, _ints(op, -1)), op.Unsqueeze(b, _ints(op, -2)))
    ends = op.ReduceSum(op.Mul(to_end, inputs), _ints(op, 2), keepdims=0)  # [b, chunks, D, N]
    ends = op.Concat(op.Unsqueeze(state, _ints(op, 1)), ends, axis=1)
    totals = op.ReduceSum(dt, _ints(op, 2), keepdims=0)  # [batch, chunks, D]
    chunk_steps = op.Pad(totals, _ints(op, 0, 1, 0, 0, 0, 0), None)  # [batch, chunks + 1, D]
    across = _decay(op, chunk_steps, op.Add(chunks, _ints(op, 1)), a)  # [b, j, k, D, N]
    starts = op.ReduceSum(op.Mul(across, op.Unsqueeze(ends, _ints(op, 1))), _ints(op, 2),
                          keepdims=0)  # [batch, chunks + 1, D, N]: after j chunks
    final = op.Squeeze(op.Slice(starts, _ints(op, -1), _ints(op, INT64_MAX), _ints(op, 1)),
                       _ints(op, 1))
    starts = op.Slice(starts, _ints(op, 0), chunks, _ints(op, 1))
    into = op.Exp(op.Mul(op.Unsqueeze(op.CumSum(dt, op.Constant(value_int=2)), _ints(op, -1)), a))
    carried = op.MatMul(op.Mul(into, op.Unsqueeze(starts, _ints(op, 2))),
                        op.Unsqueeze(c, _ints(op, -1)))  # [batch, chunks, q, D, 1]
    y = op.Add(y, op.Squeeze(carried, _ints(op, -1)))
    y = op.Reshape(y, op.Concat(_ints(op, 0), op.Mul(chunks, q), _ints(op, -1), axis=0))
    return op.Slice(y, _ints(op, 0), seq, _ints(op, 1)), final
