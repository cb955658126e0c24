"""The gated delta rule (gated DeltaNet's recurrence), chunked, with a carried state.

Per head, with state S [k_dim, v_dim], decay g_t <= 0 (log space) and rate beta_t::

    S_t = exp(g_t) * S_{t-1} + k_t (outer) beta_t * (v_t - exp(g_t) * S_{t-1}^T k_t)
    y_t = S_t^T q_t

The sequence is cut into chunks of Q = min(seq, chunk_size) positions (the last
one zero-padded: a step with g = 0 and beta = 0 is the identity). Inside a chunk
the delta updates condense into one unit-lower-triangular system (the WY / "UT"
form of the DeltaNet papers); its inverse is the finite Neumann series of a
nilpotent matrix, taken as a product of log2(chunk_size) squarings, so no
triangular solve is needed. Each chunk is then an affine map of the state it
enters, S_next = A S + B, and y = P S + R; a ``Scan`` over the chunks (two ops
per chunk) carries the state, everything else runs on all chunks at once.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript._internal.builder import make_value

INT64_MAX = 2**63 - 1
FLOAT = ir.DataType.FLOAT


def _ints(op, *values):
    return op.Constant(value_ints=list(values))


def _float(op, value: float):
    return op.Constant(value=ir.tensor(np.array(value, dtype=np.float32)))


def _t(op, x):
    """Swaps the last two axes of a rank-5 tensor."""
    return op.Transpose(x, perm=[0, 1, 2, 4, 3])


def _eye(op, n):
    """The identity [n, n] (n a 1-element int64 tensor)."""
    return op.EyeLike(op.ConstantOfShape(op.Concat(n, n, axis=0)), dtype=FLOAT)


def _triangle(op, q, strict: bool):
    """[q, q] booleans: row > col (strict) or row >= col."""
    index = op.Range(op.Constant(value_int=0), op.Squeeze(q), op.Constant(value_int=1))
    rows = op.Unsqueeze(index, _ints(op, 1))
    return op.Greater(rows, index) if strict else op.GreaterOrEqual(rows, index)


def _unit_lower_inverse(op, strict_lower, eye, chunk_size: int):
    """(I + L)^-1 for strictly lower L [..., q, q], q <= chunk_size: with N = -L nilpotent,
    sum_k N^k = (I + N)(I + N^2)(I + N^4)..., enough factors to reach N^chunk_size = 0."""
    power = op.Neg(strict_lower)
    inverse = op.Add(eye, power)
    for _ in range(max(0, math.ceil(math.log2(chunk_size)) - 1)):
        power = op.MatMul(power, power)
        inverse = op.Add(inverse, op.MatMul(inverse, power))
    return inverse


def _scan_states(op, a, b, state):
    """S_{c+1} = A_c S_c + B_c over axis 2 of a [b, h, chunks, dk, dk], b [b, h, chunks, dk, dv]
    -> (each chunk's entering state [b, h, chunks, dk, dv], the final state)."""
    def body(op, s, a_c, b_c):
        return op.Add(op.MatMul(a_c, s), b_c), op.Identity(s)

    graph = op.builder.subgraph(
        body, inputs=[make_value("s", None), make_value("a_c", None), make_value("b_c", None)],
        outputs=[make_value("s_next", None), make_value("s_in", None)], name="delta_chunks")
    for value in (*graph.inputs, *graph.outputs):
        value.type = ir.TensorType(FLOAT)
    graph.inputs[0].shape = ir.Shape([None] * 4)
    for value in graph.inputs[1:]:
        value.shape = ir.Shape([None] * 4)
    # chunks first: Scan's default axis 0, the one every runtime implements
    chunks_first = [2, 0, 1, 3, 4]
    final, entering = op.Scan(state, op.Transpose(a, perm=chunks_first),
                              op.Transpose(b, perm=chunks_first), body=graph,
                              num_scan_inputs=2, _outputs=2)
    return op.Transpose(entering, perm=[1, 2, 0, 3, 4]), final


def gated_delta_rule(op, q, k, v, g, beta, state, chunk_size: int):
    """float32 q, k [batch, seq, heads, k_dim] (q already scaled), v [batch, seq, heads, v_dim],
    g, beta [batch, seq, heads], state [batch, heads, k_dim, v_dim]
    -> (y [batch, seq, heads, v_dim], final state)."""
    seq = op.Shape(q, start=1, end=2)
    size = op.Min(seq, _ints(op, chunk_size))
    chunks = op.Div(op.Sub(op.Add(seq, size), _ints(op, 1)), size)
    pads = op.Concat(_ints(op, 0), op.Sub(op.Mul(chunks, size), seq), axis=0)

    def chunked(t, vector: bool):  # pad, cut into chunks, heads first: [b, h, c, q(, d)]
        t = op.Pad(t, pads, None, _ints(op, 1))
        tail = op.Shape(t, start=2)  # heads (, dim)
        t = op.Reshape(t, op.Concat(_ints(op, 0), chunks, size, tail, axis=0))
        return op.Transpose(t, perm=[0, 3, 1, 2, 4] if vector else [0, 3, 1, 2])

    q, k, v = (chunked(t, True) for t in (q, k, v))
    g, beta = (chunked(t, False) for t in (g, beta))
    cumulative = op.CumSum(g, op.Constant(value_int=3))  # [b, h, c, q]
    lower = _triangle(op, size, strict=False)
    gaps = op.Sub(op.Unsqueeze(cumulative, _ints(op, -1)), op.Unsqueeze(cumulative, _ints(op, -2)))
    decay = op.Exp(op.Where(lower, gaps, _float(op, -math.inf)))  # exp(G_i - G_j), i >= j
    rate = op.Unsqueeze(beta, _ints(op, -1))
    strict = op.Where(_triangle(op, size, strict=True),
                      op.Mul(op.Mul(op.MatMul(k, _t(op, k)), decay), rate), _float(op, 0.0))
    inverse = _unit_lower_inverse(op, strict, _eye(op, size), chunk_size)
    grown = op.Exp(op.Unsqueeze(cumulative, _ints(op, -1)))  # exp(G_i)
    u = op.MatMul(inverse, op.Mul(v, rate))  # [b, h, c, q, dv]
    w = op.MatMul(inverse, op.Mul(op.Mul(k, rate), grown))  # [b, h, c, q, dk]
    scores = op.Mul(op.MatMul(q, _t(op, k)), decay)
    reads = op.Sub(op.Mul(q, grown), op.MatMul(scores, w))  # y = reads @ S + scores @ u
    last = op.Slice(cumulative, _ints(op, -1), _ints(op, INT64_MAX), _ints(op, 3))
    to_end = op.Mul(k, op.Exp(op.Unsqueeze(op.Sub(last, cumulative), _ints(op, -1))))
    a = op.Sub(op.Mul(op.Unsqueeze(op.Exp(last), _ints(op, -1)),
                      _eye(op, op.Shape(q, start=4, end=5))),
               op.MatMul(_t(op, to_end), w))
    b = op.MatMul(_t(op, to_end), u)
    entering, final = _scan_states(op, a, b, state)
    y = op.Add(op.MatMul(reads, entering), op.MatMul(scores, u))  # [b, h, c, q, dv]
    y = op.Reshape(op.Transpose(y, perm=[0, 2, 3, 1, 4]),
                   op.Concat(_ints(op, 0), _ints(op, -1), op.Shape(y, start=1, end=2),
                             op.Shape(y, start=4, end=5), axis=0))
    return op.Slice(y, _ints(op, 0), seq, _ints(op, 1)), final
