"""Lower: GroupQueryAttention with packed QKV -> separate query, key and value inputs.

For EPs whose GQA kernel takes no packed QKV for the build dtype (e.g. dml,
mlx), the reverse of PackQKV:
    qkv = MatMul(x, W [hidden, (H+2KV)*D]) [+ b]
    GroupQueryAttention(qkv, <empty>, <empty>, ...)                 packed_qkv
->  q = MatMul(x, W[:, :H*D]) [+ b[:H*D]];  k = ...;  v = ...
    GroupQueryAttention(q, k, v, ...)
The weight/bias slices are ``ir.LazyTensor`` initializers (each slices its
parent when saved), so nothing is read while optimizing. If the packed tensor
comes from anything else (a non-constant weight, a shared projection, another
op), a ``Split`` into [H*D, KV*D, KV*D] on the last axis is inserted instead.
Legal for the decoder role where ``not caps.packs_qkv(dtype)``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.contrib.group_query_attention import GqaSpec, retarget_gqa_node, spec_from_node
from mobius.rewrite.pack_qkv import Projection, lazy_initializer, projection
from mobius.rewrite.fusion_util import constant
from mobius.rewrite.rule import NodeRule, RuleContext
from mobius.roles import DECODER


@dataclasses.dataclass
class _Match:
    gqa: ir.Node
    spec: GqaSpec


class UnpackQKV(NodeRule):
    name = "UnpackQKV"
    stage = "lower"
    order = 20

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.role == DECODER and not ctx.caps.packs_qkv(ctx.dtype)

    def match(self, node: ir.Node) -> _Match | None:
        spec = spec_from_node(node)
        if spec is None or not spec.packed_qkv or not node.inputs or node.inputs[0] is None:
            return None
        return _Match(node, spec)

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        q, k, v = unpack_query(model.graph, match.gqa, match.spec)
        spec = dataclasses.replace(match.spec, packed_qkv=False)
        retarget_gqa_node(model, match.gqa, spec, [q, k, v, *match.gqa.inputs[3:]])


def unpack_query(graph: ir.Graph, gqa: ir.Node, spec: GqaSpec) -> tuple[ir.Value, ir.Value, ir.Value]:
    """Inserts (before ``gqa``) what computes q, k, v from its packed query input; returns them."""
    packed = gqa.inputs[0]
    widths = _widths(spec)
    source = projection(packed, gqa)
    if source is not None and tuple(source.weight.shape)[1] == sum(widths):
        return _slice_projection(graph, gqa, source, widths)
    return split_packed(graph, gqa, packed, widths)


def split_packed(graph: ir.Graph, before: ir.Node, packed: ir.Value, widths) -> tuple:
    """q, k, v = Split(packed, widths, axis=-1), inserted before ``before``."""
    sizes = constant(graph, np.array(widths, dtype=np.int64))
    split = ir.Node("", "Split", [packed, sizes], attributes=[ir.AttrInt64("axis", -1)],
                    num_outputs=3, name=f"{before.name}/split_qkv" if before.name else None)
    for out, width in zip(split.outputs, widths):
        out.type = packed.type
        if packed.shape is not None and len(packed.shape) == 3:
            out.shape = ir.Shape([packed.shape[0], packed.shape[1], width])
    graph.insert_before(before, split)
    return tuple(split.outputs)


def _slice_projection(graph: ir.Graph, gqa: ir.Node, source: Projection, widths) -> tuple:
    x = source.input
    bounds = np.cumsum([0, *widths])
    parts, nodes = [], []
    for role, start, stop in zip("qkv", bounds[:-1], bounds[1:]):
        weight = lazy_initializer(
            graph, _part_name(source.weight.name, role, "weight"),
            slice_loader(source.weight.const_value, int(start), int(stop), axis=1),
            source.weight.const_value.dtype, [source.weight.shape[0], int(stop - start)])
        name = source.matmul.name
        matmul = ir.Node("", "MatMul", [x, weight], name=f"{name}/{role}" if name else None)
        nodes.append(matmul)
        out = matmul.outputs[0]
        if source.bias is not None:
            bias = lazy_initializer(
                graph, _part_name(source.bias.name, role, "bias"),
                slice_loader(source.bias.const_value, int(start), int(stop), axis=0),
                source.bias.const_value.dtype, [int(stop - start)])
            add = ir.Node("", "Add", [out, bias], name=f"{name}/{role}_bias" if name else None)
            nodes.append(add)
            out = add.outputs[0]
        out.type = source.out.type
        if source.out.shape is not None and len(source.out.shape) == 3:
            out.shape = ir.Shape([source.out.shape[0], source.out.shape[1], int(stop - start)])
        parts.append(out)
    graph.insert_before(gqa, nodes)
    return tuple(parts)


class slice_loader:  # noqa: N801 - used like a function
    """The function of a lazy slice: reads the parent and keeps [start, stop) on ``axis``."""

    def __init__(self, parent: ir.TensorProtocol, start: int, stop: int, axis: int):
        self.parent, self.start, self.stop, self.axis = parent, start, stop, axis

    def __call__(self) -> ir.TensorProtocol:
        array = np.take(self.parent.numpy(), np.arange(self.start, self.stop), axis=self.axis)
        return ir.Tensor(np.ascontiguousarray(array), dtype=self.parent.dtype)


def _widths(spec: GqaSpec) -> tuple[int, int, int]:
    kv = spec.kv_num_heads * spec.head_dim
    return spec.num_heads * spec.head_dim, kv, kv


def _part_name(packed_name: str | None, role: str, kind: str) -> str:
    """model.layers.0.self_attn.qkv_proj.weight -> model.layers.0.self_attn.q_proj.weight."""
    if packed_name and "qkv_proj" in packed_name:
        return packed_name.replace("qkv_proj", f"{role}_proj")
    return f"{packed_name or 'qkv_' + kind}.{role}"
