"""The onnxscript GraphBuilder every mobius graph and function body is built with.

onnxscript 0.7.2's builder does three things on every op call that cost most
of a tiny model's build (cProfile of the cuda int4 builds of every family):

* it looks up the op's schema in ONNX's registry, a failed (raising) lookup
  for every custom-domain op (~5% of the cuda fusion suite's CPU);
* it turns the op's ``onnx.defs.OpSchema`` into an ``ir.schemas.OpSignature``
  to split positional arguments into inputs and attributes (26%);
* it runs ONNX shape inference on the new node by serializing it and its
  input types to protobuf (another ~25%).

All are pure functions of what they read (nothing registers schemas during a
build): a schema of (op type, domain, opset); a signature of (domain, op type,
since_version); an inferred output type and shape of the op, its attributes
and its inputs' types, shapes and small constant values (what onnxscript
hands to ONNX's inference). So this builder memoizes them, and a layer that
repeats the previous layer's ops (every decoder) infers nothing twice.

A fourth cost (~8% of the cuda fusion suite under cProfile): onnx_ir infers
the type of a list attribute (``perm=[0, 2, 1]``) only after isinstance checks
against its runtime-checkable graph / tensor / type Protocols, which walk every
Protocol member (a tensor attribute pays the graph one). This builder types
plain lists, tuples and tensors itself.

The graphs it builds are unchanged (the EP goldens pin them; serialized graphs,
value_info included, were compared byte for byte).
"""

from __future__ import annotations

from typing import Callable, Sequence

import onnx
import onnx_ir as ir
from onnxscript._internal import builder as onnxscript_builder, param_manipulation

_SCHEMAS: dict[tuple[str, str, int | None], onnx.defs.OpSchema | None] = {}
_SIGNATURES: dict[tuple[str, str, int], ir.schemas.OpSignature] = {}
#: inference key -> per output: (dtype, dims), or None where nothing was inferred
_INFERRED: dict[tuple, tuple] = {}
_INFERENCE_ERROR = "pkg.onnxscript.shape_inference_error"
#: onnxscript passes constant inputs up to this many elements to ONNX's inference
_CONSTANT_INPUT_LIMIT = 20
_PLAIN_ATTRIBUTES = (ir.AttributeType.INT, ir.AttributeType.FLOAT, ir.AttributeType.STRING)
_LIST_ATTRIBUTES = (ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS)
#: element type -> attribute type of a list of it, in the order onnx_ir tries them
_SEQUENCE_TYPES = ((int, ir.AttributeType.INTS), (float, ir.AttributeType.FLOATS),
                   (str, ir.AttributeType.STRINGS))


def _signature(schema: onnx.defs.OpSchema) -> ir.schemas.OpSignature:
    key = (schema.domain, schema.name, schema.since_version)
    if key not in _SIGNATURES:
        _SIGNATURES[key] = ir.schemas.OpSignature.from_op_schema(schema)
    return _SIGNATURES[key]


class GraphBuilder(onnxscript_builder.GraphBuilder):
    """onnxscript's GraphBuilder with schemas, signatures and inference memoized and
    list / tensor attributes typed up front."""

    def _get_schema(self, op_type, domain, version):
        key = (op_type, domain, version)
        if key not in _SCHEMAS:
            _SCHEMAS[key] = super()._get_schema(op_type, domain, version)
        return _SCHEMAS[key]

    def _partition_inputs_attributes(self, schema, args, kwargs):
        if schema is None:
            return args, kwargs
        return param_manipulation.separate_input_attributes_from_arguments(
            _signature(schema), list(args), kwargs, fill_defaults=False, allow_extra_args=False)

    def _cast_attributes(self, schema, attributes):
        return {name: _typed(name, value) for name, value in (attributes or {}).items()}

    def _infer_shapes(self, node: ir.Node) -> None:
        key = _inference_key(node)
        if key is None:
            super()._infer_shapes(node)
        elif key in _INFERRED:
            _apply(node, _INFERRED[key])
        else:
            super()._infer_shapes(node)
            inferred = _inferred(node)
            if inferred is not None:
                _INFERRED[key] = inferred


def _typed(name: str, value):
    """``value`` as the ``ir.Attr`` onnx_ir would make of it, where it is an
    ``ir.Tensor`` or a non-empty list or tuple of ints, floats or strings (no
    graph Protocol can match these exact types).

    Anything else passes through to onnx_ir unchanged: scalars are already typed
    on its fast path, an empty list gets its warning and INTS, a mixed one its error.
    """
    if type(value) is ir.Tensor:
        return ir.convenience.convert_attribute(name, value, ir.AttributeType.TENSOR)
    if type(value) in (list, tuple) and value:
        for element, attr_type in _SEQUENCE_TYPES:
            if all(isinstance(x, element) for x in value):
                return ir.convenience.convert_attribute(name, value, attr_type)
    return value


def _dims(shape: ir.Shape | None) -> tuple | None:
    if shape is None:
        return None
    return tuple(d if isinstance(d, int) else d.value for d in shape.dims)


def _tensor_dtype(value: ir.Value) -> ir.DataType | None | bool:
    """The value's element type; None if untyped; False if not a tensor type."""
    if value.type is None:
        return None
    return value.type.dtype if isinstance(value.type, ir.TensorType) else False


def _input_key(value: ir.Value | None) -> tuple | None | bool:
    if value is None:
        return None
    dtype = _tensor_dtype(value)
    if dtype is False:
        return False
    constant = value.const_value
    small = (constant.dtype, constant.tobytes()) if (
        constant is not None and constant.size <= _CONSTANT_INPUT_LIMIT) else None
    return (dtype, _dims(value.shape), small)


def _inference_key(node: ir.Node) -> tuple | None:
    """What ONNX's inference of ``node`` reads, hashable; None where not memoizable
    (tensor / graph attributes, non-tensor types, outputs that already carry a type)."""
    if any(out.type is not None or out.shape is not None for out in node.outputs):
        return None
    attributes = []
    for name, attr in sorted(node.attributes.items()):
        if attr.type in _PLAIN_ATTRIBUTES:
            attributes.append((name, attr.value))
        elif attr.type in _LIST_ATTRIBUTES:
            attributes.append((name, tuple(attr.value)))
        else:
            return None
    inputs = tuple(_input_key(v) for v in node.inputs)
    if False in inputs:
        return None
    return (node.domain, node.op_type, node.version, tuple(attributes), inputs,
            len(node.outputs))


def _inferred(node: ir.Node) -> tuple | None:
    """What inference gave each output; None (not memoized) after an inference error
    (its message names the node) or a non-tensor type."""
    if _INFERENCE_ERROR in node.metadata_props:
        return None
    if any(out.type is not None and not isinstance(out.type, ir.TensorType)
           for out in node.outputs):
        return None
    return tuple(None if out.type is None else (out.type.dtype, _dims(out.shape))
                 for out in node.outputs)


def _apply(node: ir.Node, outputs: tuple) -> None:
    for out, inferred in zip(node.outputs, outputs):
        if inferred is not None:
            dtype, dims = inferred
            out.type = ir.TensorType(dtype)
            out.shape = None if dims is None else ir.Shape(dims)


def build_function(body: Callable, inputs: Sequence[ir.Value | None], *, domain: str,
                   name: str, opset: int) -> ir.Function:
    """An ``ir.Function`` ``domain::name`` whose graph is what ``body(op, *inputs)`` builds.

    An absent optional input (None) is passed to ``body`` as None and still
    declared as a formal input (``input_<i>``), so positions match the node's.
    Constants the builder made initializers become Constant nodes (a function
    body has no initializers).
    """
    formal = [v if v is not None else ir.Value(name=f"input_{i}") for i, v in enumerate(inputs)]
    graph = ir.Graph(inputs=formal, outputs=[], nodes=[], name=f"{name}_body",
                     opset_imports={"": opset})
    outputs = body(GraphBuilder(graph).op, *inputs)
    graph.outputs.extend(outputs if isinstance(outputs, (list, tuple)) else [outputs])
    onnxscript_builder.lift_initializers_to_constants(graph)
    return ir.Function(domain, name, graph=graph, attributes={})
