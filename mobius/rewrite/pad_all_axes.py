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

import numpy as np
import onnx_ir as ir

from mobius.rewrite.rule import NodeRule, RuleContext, initializer_array


class PadAllAxes(NodeRule):
    name = "PadAllAxes"

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
        name = node.name or f"pad_{id(node)}"
        with_zero = ir.Node("", "Concat", [pads, ir.Value(name=f"{name}/zero", const_value=ir.tensor(
            np.zeros(1, np.int64)))], attributes=[ir.AttrInt64("axis", 0)], name=f"{name}/with_zero")
        full = ir.Node("", "Gather", [with_zero.outputs[0], ir.Value(
            name=f"{name}/slots", const_value=ir.tensor(np.array(index, np.int64)))],
            attributes=[ir.AttrInt64("axis", 0)], name=f"{name}/all_axes")
        for constant in (with_zero.inputs[1], full.inputs[1]):
            model.graph.register_initializer(constant)
        for out, size in ((with_zero.outputs[0], zero + 1), (full.outputs[0], 2 * rank)):
            out.type, out.shape = ir.TensorType(ir.DataType.INT64), ir.Shape([size])
        model.graph.insert_before(node, [with_zero, full])
        node.replace_input_with(1, full.outputs[0])
        node.resize_inputs(2 if value is None else 3)
