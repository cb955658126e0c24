"""Lower: Pad(x, pads, value, axes) -> Pad(x, pads for every axis, value).

Opset 18 gave Pad an ``axes`` input (pad only these axes); mobius's chunked
SSD scan (components/ssd_scan.py) pads the sequence axis that way. Runtimes
that read ``pads`` as covering every axis (OpenVINO 2025.4's ONNX frontend:
"length of pads_begin mismatches with rank of input") get the full form,
    full = Gather(Concat(pads, [0]), index)
where ``index`` picks, for each begin and end slot of every axis, that axis's
entry of ``pads`` or the appended zero. Needs constant axes and a known rank.
Legal where ``not caps.supports_pad_axes``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.rewrite.fusion_util import constant, emit
from mobius.rewrite.rule import NodeRule, RuleContext, initializer_array


class PadAllAxes(NodeRule):
    name = "PadAllAxes"
    stage = "lower"
    order = 60

    def applies(self, ctx: RuleContext) -> bool:
        return not ctx.caps.supports_pad_axes

    def match(self, node: ir.Node) -> ir.Node | None:
        if node.op_type != "Pad" or node.domain != "" or len(node.inputs) < 4:
            return None
        x, axes = node.inputs[0], node.inputs[3]
        if axes is None or initializer_array(axes) is None or x.shape is None:
            return None
        return node

    def rewrite(self, model: ir.Model, node: ir.Node, ctx: RuleContext) -> None:
        x, pads, value, axes = node.inputs[:4]
        rank = len(x.shape)
        axes = [int(a) % rank for a in initializer_array(axes).reshape(-1)]
        zero = 2 * len(axes)  # the appended 0 in Concat(pads, [0])
        index = [axes.index(i) if i in axes else zero for i in range(rank)]
        index += [axes.index(i) + len(axes) if i in axes else zero for i in range(rank)]
        nodes: list[ir.Node] = []
        with_zero = emit(nodes, "Concat", [pads, constant(model.graph, [0])], axis=0)
        full = emit(nodes, "Gather", [with_zero, constant(model.graph, index)], axis=0)
        for out, size in ((with_zero, zero + 1), (full, 2 * rank)):
            out.type, out.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([size])
        model.graph.insert_before(node, nodes)
        node.replace_input_with(1, full)
        node.resize_inputs(2 if value is None else 3)
