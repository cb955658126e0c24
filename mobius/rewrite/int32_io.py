"""Lower: int64 graph inputs/outputs -> int32, for EPs without int64 I/O (``caps.supports_int64=False``).

Each int64 graph input keeps its name and becomes int32; a ``Cast(to=INT64)``
right after it feeds every consumer that needs int64. Consumers that read the
value identically as int32 take the int32 input directly (Gather indices,
Cast, Shape, ...), so e.g. the embedding Gather reads ``input_ids`` with no
Cast at all. Each int64 graph output gets a ``Cast(to=INT32)`` in front and
keeps its name. Values outside the int32 range are not representable: that
is the contract of such an EP.

Why a rule and not the task's build-time flag (there used to be a
``TaskFlags.int32_inputs``): by DESIGN.md's decision boundary, everything this
needs -- the graph I/O and its consumers -- is in the finished graph, so it is
post-processing. As a rule it also covers every task and any ``ir.Model`` handed
to ``optimize_model`` (not only decoders mobius builds), runs after fusions that
read the inputs (GroupQueryAttention's position_ids stays int64 via the Cast),
and lets the generic graph keep the int64 contract that is the parity
reference. Keeping both would be two mechanisms for one constraint, so the task
flag was removed.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.rewrite.rule import Rule, RuleContext

#: (domain, op_type, input index) that give the same result for int32 and int64 input.
_ACCEPTS_INT32 = frozenset({
    ("", "Gather", 1), ("", "GatherElements", 1), ("", "GatherND", 1),
    ("", "Cast", 0), ("", "Shape", 0), ("", "Size", 0),
})


class Int32GraphIO(Rule):
    name = "Int32GraphIO"
    stage = "lower"
    order = 90

    def applies(self, ctx: RuleContext) -> bool:
        return not ctx.caps.supports_int64

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        graph = model.graph
        count = 0
        first = next(iter(graph), None)
        for value in list(graph.inputs):
            if value.dtype != ir.DataType.INT64:
                continue
            cast = _narrow_input(graph, value)
            if cast is not None:
                if first is not None:
                    graph.insert_before(first, cast)
                else:
                    graph.append(cast)
            count += 1
        for index, value in enumerate(list(graph.outputs)):
            if value.dtype != ir.DataType.INT64:
                continue
            cast = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", ir.DataType.INT32)])
            out = cast.outputs[0]
            out.type = ir.TensorType(ir.DataType.INT32)
            out.shape = value.shape.copy() if value.shape is not None else None
            graph.append(cast)
            graph.outputs[index] = out
            name = value.name
            if not value.is_graph_input():
                value.name = f"{name}_int64"
            out.name = name
            count += 1
        return count


def _narrow_input(graph: ir.Graph, value: ir.Value) -> ir.Node | None:
    """Retypes ``value`` as int32; returns the Cast to int64 its other readers need (or None)."""
    uses = list(value.uses())
    value.type = ir.TensorType(ir.DataType.INT32)
    wide_uses = [(node, index) for node, index in uses
                 if (node.domain, node.op_type, index) not in _ACCEPTS_INT32]
    if not wide_uses:
        return None
    cast = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", ir.DataType.INT64)],
                   name=f"{value.name}/to_int64")
    wide = cast.outputs[0]
    wide.name = f"{value.name}_int64"
    wide.type = ir.TensorType(ir.DataType.INT64)
    wide.shape = value.shape.copy() if value.shape is not None else None
    for node, index in wide_uses:
        node.replace_input_with(index, wide)
    return cast
