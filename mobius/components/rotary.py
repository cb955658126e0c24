"""Rotary position embedding: cos/sin per position, and their application.

The model computes cos/sin once ([batch, seq, rotary_dim/2]) from position_ids
and every attention layer applies them with the standard ONNX
RotaryEmbedding op (opset 23). Static variants gather from precomputed tables
(which the GQA fusion later reuses as ``cos_cache``/``sin_cache``); dynamic
NTK computes its frequencies in the graph from the longest position seen;
LongRoPE switches between its short and long tables on that length.
"""

from __future__ import annotations

import numpy as np
from onnxscript import nn

import onnx_ir as ir

from mobius.components.weight import constant
from mobius.config.rope import RopeConfig
from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype


class RotaryEmbedding(nn.Module):
    """position_ids [batch, seq] -> (cos, sin), each [batch, seq, rotary_dim/2]."""

    def __init__(self, rope: RopeConfig):
        super().__init__()
        self.rope = rope
        dtype = numpy_dtype(get_build_dtype())
        if rope.rope_type == "dynamic":
            return  # computed in the graph
        if rope.rope_type == "longrope":
            short = _tables(rope, rope.longrope_inv_freq(rope.short_factor))
            long = _tables(rope, rope.longrope_inv_freq(rope.long_factor))
            self.cos_cache = constant(short[0].astype(dtype), "cos_cache")
            self.sin_cache = constant(short[1].astype(dtype), "sin_cache")
            self.long_cos_cache = constant(long[0].astype(dtype), "long_cos_cache")
            self.long_sin_cache = constant(long[1].astype(dtype), "long_sin_cache")
            return
        cos, sin = rope.cos_sin_cache()
        self.cos_cache = constant(cos.astype(dtype), "cos_cache")
        self.sin_cache = constant(sin.astype(dtype), "sin_cache")

    def forward(self, op, position_ids):
        rope = self.rope
        if rope.rope_type == "dynamic":
            return self._dynamic_ntk(op, position_ids)
        cos = op.Gather(self.cos_cache, position_ids, axis=0)
        sin = op.Gather(self.sin_cache, position_ids, axis=0)
        if rope.rope_type == "longrope":
            use_long = op.Greater(_longest_position(op, position_ids),
                                  op.Constant(value_int=rope.original_max_position_embeddings))
            cos = op.Where(use_long, op.Gather(self.long_cos_cache, position_ids, axis=0), cos)
            sin = op.Where(use_long, op.Gather(self.long_sin_cache, position_ids, axis=0), sin)
        return cos, sin

    def _dynamic_ntk(self, op, position_ids):
        rope = self.rope
        dim = rope.rotary_dim
        max_pos = float(rope.max_position_embeddings)
        length = op.Cast(_longest_position(op, position_ids), to=ir.DataType.FLOAT)
        length = op.Max(length, op.Constant(value_float=max_pos))
        growth = op.Sub(op.Mul(length, op.Constant(value_float=rope.factor / max_pos)),
                        op.Constant(value_float=rope.factor - 1.0))
        base = op.Mul(op.Constant(value_float=rope.theta),
                      op.Pow(growth, op.Constant(value_float=dim / (dim - 2))))
        exponents = op.Constant(value=ir.tensor(np.arange(0, dim, 2, dtype=np.float32) / dim))
        inv_freq = op.Reciprocal(op.Pow(base, exponents))
        positions = op.Unsqueeze(op.Cast(position_ids, to=ir.DataType.FLOAT),
                                 op.Constant(value_ints=[-1]))
        angles = op.Mul(positions, inv_freq)
        dtype = get_build_dtype()
        return op.Cast(op.Cos(angles), to=dtype), op.Cast(op.Sin(angles), to=dtype)


def _longest_position(op, position_ids):
    """max(position_ids) + 1: the sequence length the dynamic variants key on."""
    return op.Add(op.ReduceMax(position_ids, keepdims=0), op.Constant(value_int=1))


def _tables(rope: RopeConfig, inv_freq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    positions = np.arange(rope.max_position_embeddings, dtype=np.float32)
    angles = np.outer(positions, inv_freq.astype(np.float32))
    scale = np.float32(rope.attention_scaling())
    return np.cos(angles) * scale, np.sin(angles) * scale


def apply_rotary(op, x, cos, sin, rotary_dim: int, head_dim: int, interleaved: bool = False):
    """Rotates x [batch, heads, seq, head_dim]: rotate-half pairs (i, i + rotary_dim/2),
    or with ``interleaved`` adjacent pairs (2i, 2i + 1) (Cohere, GLM)."""
    partial = rotary_dim if rotary_dim != head_dim else 0
    return op.RotaryEmbedding(x, cos, sin, interleaved=int(interleaved),
                              rotary_embedding_dim=partial)
