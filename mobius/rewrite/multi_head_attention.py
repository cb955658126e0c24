"""Fuse: bidirectional attention over split heads -> com.microsoft MultiHeadAttention.

Pattern (what encoders and vision towers emit; ``x_q``, ``x_k``, ``x_v`` rank-3
projections [batch, seq, N * head_dim]):
    q = Transpose(Reshape(x_q, [0, 0, N, d]), perm=[0, 2, 1, 3])     # same for k, v
    a = Attention(q, k, v[, mask], is_causal=0, scale=s)             # opset 23, no cache
    y = Reshape(Transpose(a, perm=[0, 2, 1, 3]), [0, 0, N * d_v])
Rewrite:
    y = MultiHeadAttention(x_q, x_k, x_v, , , mask, num_heads=N, scale=s)
The additive mask (padding, relative position bias, causal) becomes
``attention_bias``, which the kernels take as [batch | 1, N | 1, seq, kv_seq]:
the mask must be rank 4 and not broadcast over queries (mobius's masks are
materialized over that axis). The split-head tensors may have other readers
(DeBERTa's position scores read q and k); they stay.

Legality: every role but the decoder (whose attention GroupQueryAttention
takes, cache included), dtypes in ``caps.mha_dtypes``. Checks: no softcap or
other Attention options the kernel lacks, one head count, Q and K head sizes
equal, rank-3 projections of the build dtype. RoPE between the split and the
Attention (ModernBERT) does not match: the kernel has no rotary.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.contrib.multi_head_attention import OP_TYPE, MhaSpec, make_mha_node
from mobius.rewrite.fusion_util import derived_name, take_over
from mobius.rewrite.rule import (
    NodeRule,
    Rejected,
    RuleContext,
    attr,
    initializer_array,
    producer,
    sole_consumer,
)
from mobius.roles import DECODER

_PERM = [0, 2, 1, 3]
#: Attention attributes the kernel reproduces (any other one set blocks the fusion)
_KNOWN_ATTRIBUTES = frozenset({"is_causal", "scale"})


@dataclasses.dataclass
class _Match:
    attention: ir.Node
    output: ir.Node  # the Reshape merging the heads
    projections: tuple[ir.Value, ir.Value, ir.Value]  # x_q, x_k, x_v
    head_dims: tuple[int, int, int]  # -1 where the Reshape infers it
    num_heads: int
    mask: ir.Value | None


class MultiHeadAttentionFusion(NodeRule):
    name = "MultiHeadAttentionFusion"
    stage = "fuse"
    order = 30

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.role != DECODER and ctx.caps.fuses_mha(ctx.dtype) and ctx.caps.has_kernel(OP_TYPE)

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "Attention" or node.domain not in ("", "ai.onnx"):
            return None
        if len(node.inputs) not in (3, 4) or any(o.uses() or o.is_graph_output()
                                                 for o in node.outputs[1:]):
            return None
        split = [_split_heads(v) for v in node.inputs[:3]]
        if any(s is None for s in split) or len({s[2] for s in split}) != 1:
            return None
        output = _merged_heads(node.outputs[0])
        if output is None:
            return None
        mask = node.inputs[3] if len(node.inputs) == 4 else None
        return _Match(node, output, tuple(s[0] for s in split), tuple(s[1] for s in split),
                      split[0][2], mask)

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        attention = match.attention
        if set(attention.attributes) - _KNOWN_ATTRIBUTES or attr(attention, "is_causal", 0):
            return Rejected("attributes MultiHeadAttention has no equivalent for (or is_causal)")
        if any(v.dtype != ctx.dtype or v.shape is None or len(v.shape) != 3
               for v in match.projections):
            return Rejected("a Q/K/V projection is not a 3-D tensor of the build dtype")
        dims = [_head_dim(v, match.num_heads) for v in match.projections]
        if None in dims or dims[0] != dims[1]:
            return Rejected(f"head sizes {dims} unknown or differ between Q and K")
        if any(declared not in (-1, dim) for declared, dim in zip(match.head_dims, dims)):
            return Rejected("a head split's reshape disagrees with the projection's width")
        merged = initializer_array(match.output.inputs[1])
        if (merged is None or merged.shape != (3,) or list(merged[:2]) != [0, 0]
                or merged[2] not in (-1, match.num_heads * dims[2])):
            return Rejected("the output reshape does not merge the heads back")
        if match.mask is not None and not _bias_ok(match.mask, match.projections[0],
                                                   match.num_heads, ctx.dtype):
            return Rejected("the additive mask has a shape or dtype MultiHeadAttention cannot take")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        q_dim = _head_dim(match.projections[0], match.num_heads)
        scale = attr(match.attention, "scale", None)
        spec = MhaSpec(match.num_heads, float(q_dim ** -0.5 if scale is None else scale))
        fused = make_mha_node(model, spec, *match.projections, match.mask,
                              name=derived_name(match.attention, OP_TYPE))
        model.graph.insert_before(match.attention, fused)
        take_over(match.output.outputs[0], fused.outputs[0])


def _split_heads(value: ir.Value) -> tuple[ir.Value, int, int] | None:
    """(x, head_dim, num_heads) for ``Transpose(Reshape(x, [0, 0, N, d]), [0, 2, 1, 3])``."""
    transpose = producer(value, "Transpose")
    if transpose is None or list(attr(transpose, "perm", [])) != _PERM:
        return None
    reshape = producer(transpose.inputs[0], "Reshape")
    if reshape is None or attr(reshape, "allowzero", 0):
        return None
    shape = initializer_array(reshape.inputs[1])
    if shape is None or shape.shape != (4,) or list(shape[:2]) != [0, 0] or shape[2] <= 0:
        return None
    if shape[3] <= 0 and shape[3] != -1:
        return None
    return reshape.inputs[0], int(shape[3]), int(shape[2])


def _merged_heads(value: ir.Value) -> ir.Node | None:
    """The Reshape of ``Reshape(Transpose(value, [0, 2, 1, 3]), shape)`` (sole readers)."""
    transpose = sole_consumer(value)
    if transpose is None or transpose.op_type != "Transpose" or transpose.domain != "":
        return None
    if list(attr(transpose, "perm", [])) != _PERM:
        return None
    reshape = sole_consumer(transpose.outputs[0])
    if reshape is None or reshape.op_type != "Reshape" or reshape.domain != "":
        return None
    return None if attr(reshape, "allowzero", 0) else reshape


def _head_dim(x: ir.Value, num_heads: int) -> int | None:
    """x's static last dim / num_heads, if it divides."""
    if x.shape is None or not x.shape or not isinstance(x.shape[-1], int):
        return None
    width = x.shape[-1]
    return width // num_heads if width % num_heads == 0 else None


def _bias_ok(mask: ir.Value, query: ir.Value, num_heads: int, dtype: ir.DataType) -> bool:
    """A rank-4 additive mask of the build dtype, [batch | 1, N | 1, seq, kv_seq]: the
    kernels broadcast only its first two axes (a symbolic dim is taken as the full one)."""
    if mask.dtype != dtype or mask.shape is None or len(mask.shape) != 4:
        return False
    heads, rows = mask.shape[1], mask.shape[2]
    if isinstance(heads, int) and heads not in (1, num_heads):
        return False
    return not (rows == 1 and query.shape[1] != 1)
