"""Lower: compute in float32 a dtype the EP stores but has no kernels for.

onnxruntime's CPU EP has no bf16 kernels for MatMul, Add, Where ..., so a bf16
build for it keeps bf16 weights and bf16 graph I/O (half the size, the same
genai contract) and computes in float32: each bf16 initializer and graph input
is Cast to float32 where it enters, constants and Cast targets become float32,
and each bf16 graph output is Cast back. The checkpoint's bf16 values are
exactly representable in float32, so only activations gain precision.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.rewrite.rule import Rule, RuleContext

FLOAT = ir.DataType.FLOAT


class Float32Compute(Rule):
    name = "Float32Compute"
    stage = "lower"
    order = 110

    def applies(self, ctx: RuleContext) -> bool:
        return not ctx.caps.computes(ctx.dtype)

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        low = ctx.dtype
        graph = model.graph
        changed = 0
        entry_casts: list[ir.Node] = []
        for value in [*graph.inputs, *graph.initializers.values()]:
            if _dtype(value) != low or not value.uses():
                continue
            cast = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", FLOAT)],
                           name=f"{value.name}/to_float32",
                           outputs=[ir.Value(name=f"{value.name}_float32",
                                             type=ir.TensorType(FLOAT), shape=value.shape)])
            for use in list(value.uses()):
                if use.node is not cast:
                    use.node.replace_input_with(use.idx, cast.outputs[0])
            entry_casts.append(cast)
            changed += 1
        for node in graph:
            changed += _retype_node(node, low)
        if entry_casts:
            first = next(iter(graph), None)
            if first is not None:
                graph.insert_before(first, entry_casts)
            else:
                graph.extend(entry_casts)
        for i, value in enumerate(list(graph.outputs)):
            if value.producer() is None or value.producer() in entry_casts:
                continue
            if _dtype(value) != low and _dtype(value) != FLOAT:
                continue
            if value.meta.get("mobius.original_dtype") != low:
                continue
            name = value.name
            value.name = f"{name}/float32"
            cast = ir.Node("", "Cast", [value], attributes=[ir.AttrInt64("to", low)],
                           outputs=[ir.Value(name=name, type=ir.TensorType(low), shape=value.shape)])
            graph.append(cast)
            graph.outputs[i] = cast.outputs[0]
            changed += 1
        return changed


def _dtype(value: ir.Value) -> ir.DataType | None:
    return value.type.dtype if value.type is not None else None


def _retype_node(node: ir.Node, low: ir.DataType) -> int:
    """Makes one node compute in float32; returns 1 if it changed anything."""
    changed = 0
    if node.op_type in ("Cast", "EyeLike", "RandomNormal", "RandomUniform") and node.domain == "":
        for key in ("to", "dtype"):
            attr = node.attributes.get(key)
            if attr is not None and attr.value == low:
                node.attributes[key] = ir.AttrInt64(key, FLOAT)
                changed = 1
    for key in ("value",):
        attr = node.attributes.get(key)
        if attr is not None and attr.type == ir.AttributeType.TENSOR and attr.value.dtype == low:
            array = attr.value.numpy().astype(np.float32)
            node.attributes[key] = ir.AttrTensor(key, ir.tensor(array))
            changed = 1
    for output in node.outputs:
        if _dtype(output) == low:
            if output.is_graph_output():
                output.meta["mobius.original_dtype"] = low
            output.type = ir.TensorType(FLOAT)
            changed = 1
    return changed
