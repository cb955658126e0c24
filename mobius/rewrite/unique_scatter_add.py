"""Lower: ScatterND(data, index, rows, reduction="add") with unique indices -> plain ScatterND.

The MoE combine (mobius/components/moe.py) scatter-adds each expert's rows
into the output at the token positions NonZero chose. Runtimes whose ScatterND
has no reduction (OpenVINO 2025.4's ONNX frontend rejects the session) get
    ScatterND(data, index, Add(GatherND(data, index), rows))
which is the same sum because NonZero never repeats a position: each slot is
read and written once. Matched only when the index is NonZero's output (or its
Transpose), the one producer that guarantees unique rows.
Legal where ``not caps.supports_scatter_reduction``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.rewrite.fusion_util import emit, take_over
from mobius.rewrite.rule import NodeRule, RuleContext, attr


class UniqueScatterAdd(NodeRule):
    name = "UniqueScatterAdd"
    stage = "lower"
    order = 50

    def applies(self, ctx: RuleContext) -> bool:
        return not ctx.caps.supports_scatter_reduction

    def match(self, node: ir.Node) -> ir.Node | None:
        if node.op_type != "ScatterND" or node.domain != "" or attr(node, "reduction") != "add":
            return None
        source = node.inputs[1].producer()
        if source is not None and source.op_type == "Transpose":
            source = source.inputs[0].producer()
        if source is None or source.op_type != "NonZero" or source.domain != "":
            return None
        return node

    def rewrite(self, model: ir.Model, node: ir.Node, ctx: RuleContext) -> None:
        data, index, rows = node.inputs
        nodes: list[ir.Node] = []
        current = emit(nodes, "GatherND", [data, index])
        total = emit(nodes, "Add", [current, rows])
        for value in (current, total):
            value.type, value.shape = rows.type, rows.shape
        out = emit(nodes, "ScatterND", [data, index, total])
        nodes[-1].name = node.name
        model.graph.insert_before(node, nodes)
        take_over(node.outputs[0], out)
        model.graph.remove(node, safe=True)
