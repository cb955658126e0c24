"""Fuse: standard Attention (+ its RotaryEmbedding) -> com.microsoft GroupQueryAttention.

Pattern (per layer, as emitted by mobius.components.attention):
    q4 = Transpose[0,2,1,3](Q [B,S,H,D]);  k4, v4 likewise
    q4 = RotaryEmbedding(q4, Gather(cos_cache, pos), Gather(sin_cache, pos))   (optional)
    Y, present_k, present_v = Attention(q4, k4, v4, mask, past_k, past_v)
    out = Reshape(Transpose[0,2,1,3](Y), [0, 0, H*D])
Rewrite:
    out, present_k, present_v = GroupQueryAttention(Q', K', V', past_k, past_v,
        seqlens_k, total_sequence_length, [cos_cache, sin_cache, pos], attention_bias=mask)
with RoPE absorbed (``do_rotary=1``) when the EP fuses RoPE, cos/sin are
gathered from constant tables and the kernel's head-size constraint holds,
else applied to the 3-D tensors beforehand (cos/sin computed in the graph:
M-RoPE's per-stream selection, LongRoPE's table switch, dynamic NTK).
A per-head norm of the rotated Q/K (``RMSNormalization(RotaryEmbedding(q4))``,
HunYuan) keeps RoPE outside and is re-applied per head on the 3-D tensors, and so does
a cache that later layers read in the graph (Gemma 4's KV sharing): the kernel rotates
the keys it stores at their cache slots, not at position_ids (left padding differs).
``seqlens_k`` / ``total_sequence_length`` are computed once per graph.
Attention with per-head sinks (mobius.components.attention_sinks: the
cache concatenated by hand, one all-zero key/value appended, the sinks as its
mask column) becomes GroupQueryAttention with the sinks as ``head_sink``
where the EP's kernel takes it (``caps.gqa_head_sink``); elsewhere it stays
standard Attention.
Legal only for the decoder role and dtypes in ``caps.gqa_dtypes``, and only
for a causal mask: GroupQueryAttention is always causal, so a mask that lets a
query see later keys (``NON_CAUSAL``, Gemma 3's image blocks) keeps Attention.
Where such a layer keeps a cache (Gemma 4's sliding layers under its image blocks), no
layer fuses: genai shares one max-length buffer between past and present for every layer
of a GQA decoder, which standard Attention cannot read.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.components.attention_mask import NON_CAUSAL
from mobius.contrib.group_query_attention import GqaSpec, make_gqa_node
from mobius.rewrite.graph_inputs import attention_mask_input
from mobius.rewrite.fusion_util import constant, emit, take_over
from mobius.rewrite.rule import (NodeRule, Rejected, RuleContext, attr, initializer_array, producer,
                                  sole_consumer)
from mobius.roles import DECODER

#: CPU GQA kernels rotate in blocks: do_rotary needs head_size % 16 == 0 there.
ROTARY_HEAD_SIZE_MULTIPLE = 16


@dataclasses.dataclass
class _Side:
    """One of Q/K/V: its [B,S,N,D] tensor, optional rotary node, head count."""

    heads_4d: ir.Value
    rotary: ir.Node | None
    num_heads: int
    post_norm: ir.Node | None = None  # a per-head norm of the rotated tensor


@dataclasses.dataclass
class _Cache:
    """Where the attention's cache and mask come from (see :func:`_sink_inputs`)."""

    key: ir.Value  # new keys [B, KV, S, D]
    value: ir.Value
    mask: ir.Value  # [B, 1, S, T]
    past_key: ir.Value
    past_value: ir.Value
    present_key: ir.Value
    present_value: ir.Value
    sinks: ir.Value | None = None  # [H]


@dataclasses.dataclass
class _Match:
    attention: ir.Node
    q: _Side
    k: _Side
    v: _Side
    out_reshape: ir.Node
    head_dim: int
    cache: _Cache


class GroupQueryAttentionFusion(NodeRule):
    name = "GroupQueryAttentionFusion"
    stage = "fuse"
    order = 10

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.role == DECODER and ctx.caps.fuses_gqa(ctx.dtype)

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "Attention" or node.domain != "":
            return None
        cache = _sink_inputs(node) if len(node.inputs) == 4 else _cache_inputs(node)
        if cache is None:
            return None
        q_in = node.inputs[0]
        sides = [_side(q_in, True), _side(cache.key, True), _side(cache.value, False)]
        if any(s is None for s in sides):
            return None
        out_transpose = sole_consumer(node.outputs[0])
        if out_transpose is None or out_transpose.op_type != "Transpose" or list(
            attr(out_transpose, "perm", [])
        ) != [0, 2, 1, 3]:
            return None
        out_reshape = sole_consumer(out_transpose.outputs[0])
        if out_reshape is None or out_reshape.op_type != "Reshape":
            return None
        head_dim = sides[0].heads_4d.shape[3] if sides[0].heads_4d.shape else None
        if not isinstance(head_dim, int):
            return None
        return _Match(node, *sides, out_reshape, head_dim, cache)

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        node = match.attention
        if attr(node, "is_causal", 0) or len(node.inputs) > 6:
            return Rejected("is_causal set or more than 6 inputs (GQA takes its own mask)")
        if NON_CAUSAL in match.cache.mask.metadata_props:
            return Rejected("the mask is not causal (GQA is always causal)")
        if caches_non_causal_attention(node.graph):
            return Rejected("another layer caches under a non-causal mask (genai's shared "
                            "past/present buffer would not fit its standard Attention)")
        sinks = match.cache.sinks
        heads = match.q.num_heads
        if sinks is not None and (not ctx.caps.gqa_head_sink or attr(node, "softcap", 0.0)
                                  or tuple(sinks.shape or ()) not in ((heads,), (1, heads, 1, 1))):
            return Rejected("attention sinks the EP's GQA cannot take (no head_sink, softcap, "
                            "or not one per head)")
        if any(o.uses() for o in node.outputs[1 if sinks is not None else 3:]):
            return Rejected("an output GQA does not produce is read")
        if match.q.num_heads % match.k.num_heads or match.k.num_heads != match.v.num_heads:
            return Rejected(f"{match.q.num_heads} query heads over {match.k.num_heads} key / "
                            f"{match.v.num_heads} value heads")
        if (match.q.rotary is None) != (match.k.rotary is None):
            return Rejected("rotary embedding on only one of Q and K")
        if match.q.rotary is not None:
            if (_rope_tables(match.q.rotary) is None) != (_rope_tables(match.k.rotary) is None):
                return Rejected("Q and K read different kinds of rotary tables")
            if match.q.rotary.inputs[1] is not match.k.rotary.inputs[1]:
                return Rejected("Q and K rotate by different positions")
            if attr(match.q.rotary, "interleaved", 0) != attr(match.k.rotary, "interleaved", 0):
                return Rejected("Q and K rotate with different interleaving")
            if (match.q.post_norm is None) != (match.k.post_norm is None):
                return Rejected("a norm after rotary on only one of Q and K")
        if attention_mask_input(match.attention.graph) is None:
            return Rejected("the graph has no attention_mask input for GQA's sequence lengths")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        graph = model.graph
        node = match.attention
        d = match.head_dim
        scale = attr(node, "scale", None) or d**-0.5
        rotary = match.q.rotary
        absorb = (rotary is not None and ctx.caps.supports_fused_rope
                  and _rope_tables(rotary) is not None and match.q.post_norm is None
                  and d % ROTARY_HEAD_SIZE_MULTIPLE == 0
                  and _rope_tables(rotary)[0].shape[1] * 2 == d
                  and not (match.cache.sinks is None and match.cache.present_key.consumers()))
        interleaved = int(attr(rotary, "interleaved", 0)) if rotary is not None else 0
        new_nodes: list[ir.Node] = []

        def flat(side: _Side) -> ir.Value:
            src = producer(side.heads_4d, "Reshape")
            if src is not None and src.inputs[0].shape is not None and len(src.inputs[0].shape) == 3:
                value = src.inputs[0]
            else:
                value = emit(new_nodes, "Reshape", [side.heads_4d, constant(graph, [0, 0, side.num_heads * d])])
            if side.rotary is not None and not absorb:
                cos, sin = side.rotary.inputs[1], side.rotary.inputs[2]
                value = emit(new_nodes, "RotaryEmbedding", [value, cos, sin],
                              interleaved=interleaved, num_heads=side.num_heads,
                              rotary_embedding_dim=attr(side.rotary, "rotary_embedding_dim", 0))
            if side.post_norm is not None:
                value = _per_head(graph, new_nodes, side, value, d)
            return value

        q, k, v = flat(match.q), flat(match.k), flat(match.v)
        cache = match.cache
        seqlens_k, total_len = _sequence_lengths(graph, new_nodes)
        inputs = [q, k, v, cache.past_key, cache.past_value, seqlens_k, total_len]
        if absorb:
            cos_cache, positions = _rope_tables_values(rotary)
            inputs += [cos_cache[0], cos_cache[1], positions]
        else:
            inputs += [None, None, None]
        inputs.append(cache.mask)
        if cache.sinks is not None:
            sinks = cache.sinks
            if len(sinks.shape) != 1:
                sinks = emit(new_nodes, "Reshape", [sinks, constant(graph, [-1])])
                sinks.type, sinks.shape = cache.sinks.type, ir.Shape([match.q.num_heads])
            inputs.append(sinks)
        spec = GqaSpec(match.q.num_heads, match.k.num_heads, d, float(scale), absorb,
                       softcap=float(attr(node, "softcap", 0.0) or 0.0),
                       rotary_interleaved=bool(absorb and interleaved),
                       head_sink=cache.sinks is not None)
        gqa = make_gqa_node(model, spec, inputs, name=node.name + "/GroupQueryAttention")
        new_nodes.append(gqa)
        graph.insert_before(node, new_nodes)
        olds = [match.out_reshape.outputs[0], cache.present_key, cache.present_value]
        for old, new in zip(olds, gqa.outputs):
            take_over(old, new)


def _cache_inputs(node: ir.Node) -> _Cache | None:
    """The plain form: Attention(q, k, v, mask, past_k, past_v) -> (y, present_k, present_v)."""
    if len(node.inputs) < 6 or len(node.outputs) < 3:
        return None
    _, k, v, mask, past_k, past_v = node.inputs[:6]
    if mask is None or past_k is None or past_v is None:
        return None
    return _Cache(k, v, mask, past_k, past_v, node.outputs[1], node.outputs[2])


def caches_non_causal_attention(graph: ir.Graph) -> bool:
    """Whether some Attention with a past cache attends under a ``NON_CAUSAL`` mask."""
    return any(n.op_type == "Attention" and len(n.inputs) > 4 and n.inputs[4] is not None
               and n.inputs[3] is not None and NON_CAUSAL in n.inputs[3].metadata_props
               for n in graph)


def is_sink_attention(node: ir.Node) -> bool:
    """Whether ``node`` is the attention-with-sinks form (see the module doc)."""
    return node.op_type == "Attention" and len(node.inputs) == 4 and _sink_inputs(node) is not None


def _sink_inputs(node: ir.Node) -> _Cache | None:
    """Attention(q, Concat(Concat(past_k, k), zeros), Concat(Concat(past_v, v), zeros),
    Concat(Expand(mask, [1, H, 1, 1]), Add(zeros, Reshape(sinks, [1, H, 1, 1]))))."""
    halves = [_with_zero_slot(value) for value in node.inputs[1:3]]
    if any(h is None for h in halves):
        return None
    (past_k, k, present_k), (past_v, v, present_v) = halves
    columns = producer(node.inputs[3], "Concat")
    if columns is None or attr(columns, "axis") not in (-1, 3) or len(columns.inputs) != 2:
        return None
    per_head, sink_column = producer(columns.inputs[0], "Expand"), producer(columns.inputs[1], "Add")
    if per_head is None or sink_column is None or _zeros(sink_column.inputs[0]) is None:
        return None
    sinks = sink_column.inputs[1]  # [1, H, 1, 1] (constant-folded), or Reshape([H])
    reshape = producer(sinks, "Reshape")
    return _Cache(k, v, per_head.inputs[0], past_k, past_v, present_k, present_v,
                  reshape.inputs[0] if reshape is not None else sinks)


def _with_zero_slot(value: ir.Value):
    """(past, new, present) if value = Concat(present = Concat(past, new), zeros) on axis 2."""
    outer = producer(value, "Concat")
    if outer is None or attr(outer, "axis") != 2 or len(outer.inputs) != 2:
        return None
    if _zeros(outer.inputs[1]) is None:
        return None
    inner = producer(outer.inputs[0], "Concat")
    if inner is None or attr(inner, "axis") != 2 or len(inner.inputs) != 2:
        return None
    return inner.inputs[0], inner.inputs[1], inner.outputs[0]


def _zeros(value: ir.Value) -> ir.Node | None:
    """The Mul if value = Mul(x, 0) (a finite x times a zero constant)."""
    mul = producer(value, "Mul")
    if mul is None:
        return None
    zero = initializer_array(mul.inputs[1])
    return mul if zero is not None and zero.size == 1 and float(zero.reshape(())) == 0 else None


def _side(value: ir.Value, may_rotate: bool) -> _Side | None:
    post_norm = producer(value, "RMSNormalization") if may_rotate else None
    if post_norm is not None:
        if attr(post_norm, "axis", -1) != -1 or producer(post_norm.inputs[0], "RotaryEmbedding") is None:
            return None
        value = post_norm.inputs[0]
    rotary = producer(value, "RotaryEmbedding") if may_rotate else None
    if rotary is not None:
        if len(rotary.inputs) > 3 and rotary.inputs[3] is not None:
            return None  # already position-indexed tables: not our pattern
        value = rotary.inputs[0]
    transpose = producer(value, "Transpose")
    if transpose is None or list(attr(transpose, "perm", [])) != [0, 2, 1, 3]:
        return None
    heads_4d = transpose.inputs[0]
    if heads_4d.shape is None or len(heads_4d.shape) != 4 or not isinstance(heads_4d.shape[2], int):
        return None
    return _Side(heads_4d, rotary, heads_4d.shape[2], post_norm)


def _per_head(graph: ir.Graph, new_nodes: list, side: _Side, value: ir.Value, d: int) -> ir.Value:
    """side.post_norm applied per head to the 3-D [B, S, N*D] ``value``."""
    norm = side.post_norm
    heads = emit(new_nodes, "Reshape", [value, constant(graph, [0, 0, side.num_heads, d])])
    normed = emit(new_nodes, "RMSNormalization", [heads, norm.inputs[1]],
                  **{name: a.value for name, a in norm.attributes.items()})
    return emit(new_nodes, "Reshape", [normed, constant(graph, [0, 0, side.num_heads * d])])


def _rope_tables(rotary: ir.Node):
    """(cos_table, sin_table) arrays if cos/sin are Gathers of constant tables."""
    values = _rope_tables_values(rotary)
    if values is None:
        return None
    (cos, sin), _ = values
    return cos.const_value.numpy(), sin.const_value.numpy()


def _rope_tables_values(rotary: ir.Node):
    gathers = [producer(rotary.inputs[1], "Gather"), producer(rotary.inputs[2], "Gather")]
    if any(g is None or attr(g, "axis", 0) != 0 for g in gathers):
        return None
    tables = [g.inputs[0] for g in gathers]
    if any(t.const_value is None or not t.is_initializer() for t in tables):
        return None
    if gathers[0].inputs[1] is not gathers[1].inputs[1]:
        return None
    return (tables[0], tables[1]), gathers[0].inputs[1]


_LENGTHS_KEY = "mobius.gqa_sequence_lengths"


def _sequence_lengths(graph: ir.Graph, new_nodes: list[ir.Node]) -> tuple[ir.Value, ir.Value]:
    """seqlens_k (int32 [B], = total - 1) and total_sequence_length (int32 scalar), once per graph.

    Keys are indexed by cache slot, and padding is masked by attention_bias,
    so every row's last valid key slot is total - 1.
    """
    cached = graph.meta.get(_LENGTHS_KEY)
    if cached is not None and all(v.producer() is not None and v.producer().graph is graph
                                  for v in cached):
        return cached
    mask = attention_mask_input(graph)
    shape = emit(new_nodes, "Shape", [mask])
    total = emit(new_nodes, "Cast", [emit(new_nodes, "Gather", [shape, constant(graph, 1)], axis=0)],
                  to=ir.DataType.INT32)
    batch = emit(new_nodes, "Gather", [shape, constant(graph, [0])], axis=0)
    last = emit(new_nodes, "Sub", [total, constant(graph, np.array(1, dtype=np.int32))])
    seqlens = emit(new_nodes, "Expand", [last, batch])
    graph.meta[_LENGTHS_KEY] = (seqlens, total)
    return seqlens, total
