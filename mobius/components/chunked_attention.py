"""Chunked local self-attention with Transformer-XL relative positions (the Universal
Speech Model's attention, Gemma 4's audio tower).

The sequence [b, t, heads * dim] is cut into blocks of ``chunk`` queries; block n
attends to the keys of its context window, positions n * chunk - past ..
n * chunk + chunk - 1 + future (past = context_left - 1, future = context_right;
keys outside the sequence are padding). Logits: q . k plus q . r, where r are the
relative keys of sinusoidal positions context // 2 .. 0 projected by
``relative_k_proj``, aligned to the window by the relative shift of Transformer-XL
(appendix B); then tanh soft-capped. A key takes part when it is valid and its
distance d = query - key lies in 0 <= d < past or 0 < -d < future (transformers' own
window rule); other logits are set to ``invalid_logit`` before the softmax.
Queries are scaled by dim^-0.5 / ln 2 * softplus(``per_dim_scale``), keys by
log2(1 + e). The window geometry is fixed per build, so the block count is the only
dynamic size.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype

BOOL, I64 = ir.DataType.BOOL, ir.DataType.INT64


@dataclasses.dataclass(frozen=True)
class ChunkGeometry:
    """Blocks of ``chunk`` queries, each seeing ``past`` keys before and ``future`` after."""

    chunk: int
    past: int
    future: int

    @property
    def context(self) -> int:
        return self.chunk + self.past + self.future

    def window(self) -> np.ndarray:
        """[chunk, context] bool: the query at q may attend to context slot c."""
        distance = np.arange(self.chunk)[:, None] + self.past - np.arange(self.context)[None]
        left = (distance >= 0) & (distance < self.past)
        right = (distance < 0) & (-distance < self.future)
        return left | right


def sinusoid_positions(context: int, size: int) -> np.ndarray:
    """[context // 2 + 1, size]: [sin, cos] of positions context // 2 .. 0 at
    timescales 1 .. 10^4 (geometric)."""
    half = size // 2
    increment = math.log(1e4) / max(half - 1, 1)
    inv = np.exp(np.arange(half, dtype=np.float32) * -increment).astype(np.float32)
    scaled = np.arange(context // 2, -1, -1, dtype=np.float32)[:, None] * inv[None]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=-1).astype(np.float32)


def _ints(op, *values):
    return op.Constant(value_ints=list(values))


def block_index(op, length, geometry: ChunkGeometry):
    """(blocks, [blocks, context] int64): each block's window into the sequence padded
    by ``past`` before (slot c of block n is padded position n * chunk + c)."""
    chunk = _ints(op, geometry.chunk)
    blocks = op.Div(op.Add(length, _ints(op, geometry.chunk - 1)), chunk)
    starts = op.Mul(op.Range(op.Constant(value_int=0), op.Squeeze(blocks),
                             op.Constant(value_int=1)), chunk)
    slots = op.Constant(value=ir.tensor(np.arange(geometry.context, dtype=np.int64)))
    return blocks, op.Add(op.Unsqueeze(starts, _ints(op, 1)), slots)


def _windows(op, x, index, geometry: ChunkGeometry, rank: int = 4):
    """x [b, t, ...] (``rank`` axes) -> [b, blocks, context, ...] (zeros outside)."""
    after = geometry.future + geometry.chunk - 1
    pads = [0, geometry.past] + [0] * (rank - 2) + [0, after] + [0] * (rank - 2)
    return op.Gather(op.Pad(x, _ints(op, *pads)), index, axis=1)


def block_mask(op, valid, index, geometry: ChunkGeometry):
    """valid [b, t] bool -> allowed [b, 1, blocks, chunk, context] bool."""
    keys = op.Unsqueeze(_windows(op, valid, index, geometry, rank=2), _ints(op, 1, 3))
    window = op.Constant(value=ir.tensor(geometry.window()))
    return op.And(keys, window)


class ChunkedRelativeAttention(nn.Module):
    """q/k/v/post projections (``projection(in, out)`` builds each), ``relative_k_proj``,
    ``per_dim_scale``; forward(x [b, t, hidden], allowed, index, blocks)."""

    def __init__(self, hidden: int, heads: int, geometry: ChunkGeometry, cap: float,
                 invalid_logit: float, projection):
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.geometry, self.cap, self.invalid = geometry, cap, invalid_logit
        self.q_proj, self.k_proj = projection(hidden, hidden), projection(hidden, hidden)
        self.v_proj, self.post = projection(hidden, hidden), projection(hidden, hidden)
        self.relative_k_proj = Linear(hidden, hidden)
        self.per_dim_scale = Weight([self.dim])
        self.positions = sinusoid_positions(geometry.context, hidden)

    def _const(self, op, value):
        """A constant in the build dtype."""
        dtype = numpy_dtype(get_build_dtype())
        return op.Constant(value=ir.tensor(np.asarray(value, dtype=np.float32).astype(dtype)))

    def _relative_logits(self, op, queries):
        """queries [b, heads, blocks, chunk, dim] -> [b, heads, blocks, chunk, context]."""
        g, count = self.geometry, self.positions.shape[0]
        rel = self.relative_k_proj(op, self._const(op, self.positions))
        rel = op.Transpose(op.Reshape(rel, _ints(op, count, self.heads, self.dim)),
                           perm=[1, 2, 0])
        flat = op.Reshape(queries, _ints(op, 0, 0, -1, self.dim))
        logits = op.Reshape(op.MatMul(flat, rel), _ints(op, 0, 0, -1, g.chunk, count))
        logits = op.Pad(logits, _ints(op, 0, 0, 0, 0, 0, 0, 0, 0, 0, g.context + 1 - count))
        logits = op.Reshape(logits, _ints(op, 0, 0, 0, -1))
        logits = op.Slice(logits, _ints(op, 0), _ints(op, g.chunk * g.context), _ints(op, 3))
        return op.Reshape(logits, _ints(op, 0, 0, 0, g.chunk, g.context))

    def _queries(self, op, x, length, blocks):
        """[b, heads, blocks, chunk, dim], scaled; the sequence padded to whole blocks."""
        q = op.Reshape(self.q_proj(op, x), _ints(op, 0, 0, self.heads, self.dim))
        scale = op.Mul(op.Softplus(self.per_dim_scale),
                       self._const(op, self.dim ** -0.5 / math.log(2)))
        q = op.Mul(q, scale)
        extra = op.Sub(op.Mul(blocks, _ints(op, self.geometry.chunk)), length)
        zeros = _ints(op, 0, 0, 0, 0, 0)
        q = op.Pad(q, op.Concat(zeros, extra, _ints(op, 0, 0), axis=0))
        q = op.Reshape(q, _ints(op, 0, -1, self.geometry.chunk, self.heads, self.dim))
        return op.Transpose(q, perm=[0, 3, 1, 2, 4])

    def forward(self, op, x, allowed, index, blocks):
        length = op.Shape(x, start=1, end=2)
        queries = self._queries(op, x, length, blocks)
        k = op.Mul(op.Reshape(self.k_proj(op, x), _ints(op, 0, 0, self.heads, self.dim)),
                   self._const(op, math.log(1 + math.e) / math.log(2)))
        v = op.Reshape(self.v_proj(op, x), _ints(op, 0, 0, self.heads, self.dim))
        k = op.Transpose(_windows(op, k, index, self.geometry), perm=[0, 3, 1, 4, 2])
        v = op.Transpose(_windows(op, v, index, self.geometry), perm=[0, 3, 1, 2, 4])
        logits = op.Add(op.MatMul(queries, k), self._relative_logits(op, queries))
        cap = self._const(op, self.cap)
        logits = op.Mul(op.Tanh(op.Div(logits, cap)), cap)
        lowest = float(np.finfo(np.float16).min) if get_build_dtype() == ir.DataType.FLOAT16 \
            else self.invalid  # -1e9 overflows float16
        logits = op.Where(allowed, logits, self._const(op, max(self.invalid, lowest)))
        out = op.MatMul(op.Softmax(logits, axis=-1), v)  # [b, heads, blocks, chunk, dim]
        out = op.Reshape(op.Transpose(out, perm=[0, 2, 3, 1, 4]),
                         _ints(op, 0, -1, self.heads * self.dim))
        out = op.Slice(out, _ints(op, 0), length, _ints(op, 1))
        return self.post(op, out)
