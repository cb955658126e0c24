"""Lower: standard ops the EP has no kernel for -> their ONNX function bodies.

The generic graph uses opset-23 ops (RMSNormalization, RotaryEmbedding,
Attention) that runtimes built against an older ONNX lack: onnxruntime's
OpenVINO EP hands them back to the CPU EP, splitting a tiny Llama into 12
subgraphs. ONNX defines each as a context-dependent function of older ops;
this rule asks ONNX for the body specialized to the node's attributes and input
types (``OpSchema.get_context_dependent_function``), inlines it, then folds
what the body computes from shapes (its reduction axes, head sizes) so that
runtimes needing static axes accept it. The ops come from
``EpCapabilities.expand_standard_ops``.

Two leftovers of the generic bodies are tidied here rather than left to every
runtime: a Split piece no node reads (RotaryEmbedding's "not rotated" part
when the whole head rotates) is dropped, and an empty optional output the node
did not ask for (Attention's ``qk_matmul_output``) is not declared.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir
from onnx import defs
from onnx_ir.passes.common import InlinePass, RemoveUnusedNodesPass
from onnxscript import optimizer

from mobius.rewrite import library_passes as lib
from mobius.rewrite.rule import Rule, RuleContext, initializer_array

_DOMAIN = "mobius.expand"  # a private domain for the bodies while they are inlined


class ExpandStandardOps(Rule):
    name = "ExpandStandardOps"
    stage = "lower"
    order = 40

    def applies(self, ctx: RuleContext) -> bool:
        return bool(ctx.caps.expand_standard_ops)

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        version = model.opset_imports.get("", 1)
        expanded = 0
        for graph in model.graphs():
            for node in list(graph):
                if node.domain == "" and node.op_type in ctx.caps.expand_standard_ops:
                    _call_body(model, node, version, expanded)
                    expanded += 1
        if not expanded:
            return 0
        InlinePass(criteria=lambda function: function.domain == _DOMAIN)(model)
        model.opset_imports.pop(_DOMAIN, None)
        # The bodies compute axes and sizes from Shape/Size: fold them with shapes inferred.
        optimizer.fold_constants(model, onnx_shape_inference=True,
                                 input_size_limit=lib.FOLD_INPUT_LIMIT,
                                 output_size_limit=lib.FOLD_INPUT_LIMIT)
        _drop_unread_split_pieces(model)
        RemoveUnusedNodesPass()(model)
        return expanded


def _call_body(model: ir.Model, node: ir.Node, version: int, index: int) -> None:
    """Turns ``node`` into a call of its ONNX function body, added to ``model.functions``."""
    schema = defs.get_schema(node.op_type, version, "")
    if not schema.has_context_dependent_function:
        raise ValueError(f"ONNX defines no function body for {node.op_type}-{schema.since_version}")
    types = [(ir.serde.serialize_value(v).type if v is not None else onnx.TypeProto())
             .SerializeToString() for v in node.inputs]
    proto = onnx.FunctionProto.FromString(schema.get_context_dependent_function(
        ir.serde.serialize_node(node).SerializeToString(), types))
    del proto.output[len(node.outputs):]  # optional outputs the node does not have
    proto.domain, proto.name = _DOMAIN, f"{node.op_type}_{index}"
    function = ir.serde.deserialize_function(proto)
    model.functions[function.identifier()] = function
    model.opset_imports[_DOMAIN] = 1
    node.domain, node.op_type = _DOMAIN, proto.name


def _drop_unread_split_pieces(model: ir.Model) -> None:
    """Split(x, sizes) with one piece read and the rest empty -> that piece is x itself."""
    for node in list(model.graph):
        if node.op_type != "Split" or node.domain != "" or len(node.inputs) < 2:
            continue
        sizes = initializer_array(node.inputs[1])
        read = [i for i, out in enumerate(node.outputs) if out.uses()]
        if (sizes is None or len(read) != 1 or len(sizes) != len(node.outputs)
                or any(out.is_graph_output() for out in node.outputs)):
            continue
        if any(int(size) for i, size in enumerate(sizes) if i != read[0]):
            continue
        node.outputs[read[0]].replace_all_uses_with(node.inputs[0])
