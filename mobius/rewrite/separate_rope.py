"""Lower: GroupQueryAttention with absorbed RoPE (do_rotary=1) -> RotaryEmbedding + plain GQA.

For EPs without fused RoPE (``not caps.supports_fused_rope``, e.g. dml), a GQA
that arrives with ``do_rotary=1`` (a graph fused for another EP, or
``optimize_model`` run on an already-optimized graph) is rewritten to
    cos = Gather(cos_cache, position_ids);  sin = Gather(sin_cache, position_ids)
    q' = RotaryEmbedding(q, cos, sin, num_heads=H)     (opset 23, 3-D [B, S, H*D])
    k' = RotaryEmbedding(k, cos, sin, num_heads=KV)
    GroupQueryAttention(q', k', v, ..., <no cos/sin/position_ids>)   do_rotary=0
which is exactly what GroupQueryAttentionFusion emits when it does not absorb
RoPE. Opset-23 RotaryEmbedding takes 3-D cos/sin [B, S, rotary_dim/2] when no
position_ids are given; the Gathers are shared by every layer (an existing
``Gather(cos_cache, position_ids)`` in the graph is reused). Partial rotary
(cos_cache narrower than head_dim/2) sets ``rotary_embedding_dim``.
A packed query (key/value empty) is split first; run UnpackQKV before this
rule where the EP does not take packed QKV, so the projections are unpacked
into three MatMuls instead.
Legal for the decoder role where ``not caps.supports_fused_rope`` (any dtype:
RoPE fusion is not dtype-dependent in the registry).
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.contrib.group_query_attention import GqaSpec, retarget_gqa_node, spec_from_node
from mobius.rewrite.rule import NodeRule, RuleContext, attr
from mobius.rewrite.unpack_qkv import split_packed
from mobius.roles import DECODER


@dataclasses.dataclass
class _Match:
    gqa: ir.Node
    spec: GqaSpec
    cos_cache: ir.Value
    sin_cache: ir.Value
    position_ids: ir.Value
    rotary_dim: int


class SeparateRoPE(NodeRule):
    name = "SeparateRoPE"
    stage = "lower"
    order = 30

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.role == DECODER and not ctx.caps.supports_fused_rope

    def match(self, node: ir.Node) -> _Match | None:
        spec = spec_from_node(node)
        if spec is None or not spec.do_rotary or len(node.inputs) < 10:
            return None
        cos_cache, sin_cache, position_ids = node.inputs[7:10]
        if cos_cache is None or sin_cache is None or position_ids is None:
            return None  # positions derived from seqlens_k: not expressible with RotaryEmbedding
        if node.inputs[0] is None or (not spec.packed_qkv and node.inputs[1] is None):
            return None
        shape = cos_cache.shape
        if shape is None or len(shape) != 2 or not isinstance(shape[1], int):
            return None
        if sin_cache.shape is None or tuple(sin_cache.shape) != tuple(shape):
            return None
        rotary_dim = 2 * shape[1]
        if rotary_dim > spec.head_dim:
            return None
        return _Match(node, spec, cos_cache, sin_cache, position_ids, rotary_dim)

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        graph, gqa, spec = model.graph, match.gqa, match.spec
        if spec.packed_qkv:
            d = spec.head_dim
            q, k, v = split_packed(graph, gqa, gqa.inputs[0],
                                   (spec.num_heads * d, spec.kv_num_heads * d, spec.kv_num_heads * d))
        else:
            q, k, v = gqa.inputs[:3]
        cos = _gathered(graph, gqa, match.cos_cache, match.position_ids)
        sin = _gathered(graph, gqa, match.sin_cache, match.position_ids)
        partial = match.rotary_dim if match.rotary_dim != spec.head_dim else 0
        rotated = []
        for value, heads, role in ((q, spec.num_heads, "q"), (k, spec.kv_num_heads, "k")):
            node = ir.Node("", "RotaryEmbedding", [value, cos, sin], attributes=[
                ir.AttrInt64("interleaved", int(spec.rotary_interleaved)), ir.AttrInt64("num_heads", heads),
                ir.AttrInt64("rotary_embedding_dim", partial)],
                name=f"{gqa.name}/rotary_{role}" if gqa.name else None)
            node.outputs[0].type, node.outputs[0].shape = value.type, value.shape
            graph.insert_before(gqa, node)
            rotated.append(node.outputs[0])
        new_spec = dataclasses.replace(spec, do_rotary=False, packed_qkv=False,
                                       rotary_interleaved=False)
        inputs = list(gqa.inputs) + [None] * (11 - len(gqa.inputs))
        inputs[:3] = [rotated[0], rotated[1], v]
        inputs[7:10] = [None, None, None]
        retarget_gqa_node(model, gqa, new_spec, inputs)

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        count = super().apply(model, ctx)
        if count:
            model.graph.sort()  # a reused Gather may sit after the first GQA that now reads it
        return count


def _gathered(graph: ir.Graph, before: ir.Node, table: ir.Value, positions: ir.Value) -> ir.Value:
    """Gather(table, positions, axis=0): an existing one if the graph has it, else a new one."""
    for use in table.uses():
        node = use.node
        if (node.op_type == "Gather" and node.domain == "" and node.graph is graph
                and use.idx == 0 and node.inputs[1] is positions and attr(node, "axis", 0) == 0):
            return node.outputs[0]
    gather = ir.Node("", "Gather", [table, positions], attributes=[ir.AttrInt64("axis", 0)],
                     name=f"{table.name}/gather_positions" if table.name else None)
    out = gather.outputs[0]
    out.type = table.type
    if positions.shape is not None and table.shape is not None:
        out.shape = ir.Shape([*positions.shape, table.shape[1]])
    graph.insert_before(before, gather)
    return out
