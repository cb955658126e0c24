"""Lower: standard ops the EP has no kernel for -> their ONNX function bodies.

The generic graph uses opset-23 ops (RMSNormalization, RotaryEmbedding,
Attention) that runtimes built against an older ONNX lack: onnxruntime's
OpenVINO EP hands them back to the CPU EP, splitting a tiny Llama into 12
subgraphs. ONNX defines each as a context-dependent function of older ops;
this rule asks ONNX for the body specialized to the node's attributes and input
types (``OpSchema.get_context_dependent_function``), folds what the body
computes from shapes (its reduction axes, head sizes) so that runtimes needing
static axes accept it, then inlines it. The ops come from
``EpCapabilities.expand_standard_ops``.

Each distinct body (op, attributes, input types and shapes: a decoder's norms
share one) is folded once, on its own, with ONNX shape inference inside it:
folding the whole model with per-node shape inference instead was half of an
OpenVINO build's time.

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
_FOLDED = "mobius.expand.folded"  # marks a body's Constant made by folding, until it is lifted


class ExpandStandardOps(Rule):
    name = "ExpandStandardOps"
    stage = "lower"
    order = 40

    def applies(self, ctx: RuleContext) -> bool:
        return bool(ctx.caps.expand_standard_ops)

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        ops = ctx.caps.expand_standard_ops
        version = model.opset_imports.get("", 1)
        bodies: dict[bytes, str] = {}  # body key -> the folded function's name
        expanded = 0
        for graph in model.graphs():
            for node in list(graph):
                if node.domain == "" and node.op_type in ops:
                    _call_body(model, node, version, bodies)
                    expanded += 1
        if not expanded:
            return 0
        InlinePass(criteria=lambda function: function.domain == _DOMAIN)(model)
        model.opset_imports.pop(_DOMAIN, None)
        _lift_folded_constants(model)
        _drop_unread_split_pieces(model)
        RemoveUnusedNodesPass()(model)
        return expanded


def _call_body(model: ir.Model, node: ir.Node, version: int, bodies: dict[bytes, str]) -> None:
    """Turns ``node`` into a call of its folded ONNX function body (one per distinct body,
    in ``model.functions``)."""
    schema = defs.get_schema(node.op_type, version, "")
    if not schema.has_context_dependent_function:
        raise ValueError(f"ONNX defines no function body for {node.op_type}-{schema.since_version}")
    types = [_type_proto(v) for v in node.inputs]
    output_types = [_type_proto(v) for v in node.outputs]
    node_proto = ir.serde.serialize_node(node)  # its attributes: what the body depends on
    del node_proto.input[:], node_proto.output[:], node_proto.metadata_props[:]
    node_proto.name = node_proto.doc_string = ""
    key = b"|".join([node_proto.SerializeToString(deterministic=True), *types, b"->",
                     *output_types])
    if key not in bodies:
        bodies[key] = f"{node.op_type}_{len(bodies)}"
        _add_folded_body(model, node, version, types, bodies[key])
    model.opset_imports[_DOMAIN] = 1
    node.domain, node.op_type = _DOMAIN, bodies[key]


def _type_proto(value: ir.Value | None) -> bytes:
    type_proto = ir.serde.serialize_value(value).type if value is not None else onnx.TypeProto()
    return type_proto.SerializeToString(deterministic=True)


def _add_folded_body(model: ir.Model, node: ir.Node, version: int, types: list[bytes],
                     name: str) -> None:
    schema = defs.get_schema(node.op_type, version, "")
    proto = onnx.FunctionProto.FromString(schema.get_context_dependent_function(
        ir.serde.serialize_node(node).SerializeToString(), types))
    del proto.output[len(node.outputs):]  # optional outputs the node does not have
    proto.domain, proto.name = _DOMAIN, name
    function = ir.serde.deserialize_function(proto)
    # The call site's types and shapes, for shape inference; its outputs' too, which may name
    # a dim the body computes (a present cache's total sequence length).
    call_values = [*node.inputs, *node.outputs]
    for i, (body_value, call_value) in enumerate(zip([*function.inputs, *function.outputs],
                                                     call_values)):
        if call_value is not None:
            body_value.type = call_value.type
            body_value.shape = _named_dims(call_value.shape, i)
    # Folding a model that holds only this function folds the body alone (its folded
    # values become Constant nodes, as a function has no initializers).
    alone = ir.Model(ir.Graph([], [], nodes=[], opset_imports=dict(model.opset_imports)),
                     ir_version=model.ir_version, functions=[function])
    written = {n for n in function if n.op_type == "Constant"}
    optimizer.fold_constants(alone, onnx_shape_inference=True,
                             input_size_limit=lib.FOLD_INPUT_LIMIT,
                             output_size_limit=lib.FOLD_INPUT_LIMIT)
    RemoveUnusedNodesPass()(alone)
    for body_node in function:  # what folding in a graph would have made an initializer
        if (body_node.op_type == "Constant" and body_node not in written
                and list(body_node.attributes) == ["value"]):
            body_node.metadata_props[_FOLDED] = "1"
    model.functions[function.identifier()] = function


def _named_dims(shape: ir.Shape | None, index: int) -> ir.Shape | None:
    """``shape`` with a name for each unnamed dim: the body's folding can then tell that a
    size it reads from that dim is the dim itself (an Expand to the same shape goes)."""
    if shape is None:
        return None
    return ir.Shape([f"_{index}_{axis}" if isinstance(dim, ir.SymbolicDim) and dim.value is None
                     else dim for axis, dim in enumerate(shape)])


def _lift_folded_constants(model: ir.Model) -> None:
    """The bodies' folded values become initializers, as folding in a graph makes them."""
    for graph in model.graphs():
        for node in list(graph):
            if node.metadata_props.pop(_FOLDED, None) is None:
                continue
            out = node.outputs[0]
            if out.is_graph_output():
                continue
            lifted = ir.Value(type=out.type, shape=out.shape,
                              const_value=ir.convenience.get_const_tensor(out))
            out.replace_all_uses_with(lifted)
            graph.remove(node, safe=True)
            lifted.name = out.name
            graph.register_initializer(lifted)


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
