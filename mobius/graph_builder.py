"""The onnxscript GraphBuilder every mobius graph and function body is built with.

onnxscript 0.7.2's builder turns the op's ``onnx.defs.OpSchema`` into an
``ir.schemas.OpSignature`` on every op call to split positional arguments into
inputs and attributes; that conversion was 26% of a tiny model's whole build
(cProfile of the cuda int4 builds of every family: 6.3 of 24 s). A signature is
a fact of (domain, op type, since_version), so this builder memoizes it; the
graphs it builds are unchanged (the EP goldens pin them).
"""

from __future__ import annotations

from typing import Callable, Sequence

import onnx
import onnx_ir as ir
from onnxscript._internal import builder as onnxscript_builder, param_manipulation

_SIGNATURES: dict[tuple[str, str, int], ir.schemas.OpSignature] = {}


def _signature(schema: onnx.defs.OpSchema) -> ir.schemas.OpSignature:
    key = (schema.domain, schema.name, schema.since_version)
    if key not in _SIGNATURES:
        _SIGNATURES[key] = ir.schemas.OpSignature.from_op_schema(schema)
    return _SIGNATURES[key]


class GraphBuilder(onnxscript_builder.GraphBuilder):
    """onnxscript's GraphBuilder with the schema -> signature step memoized."""

    def _partition_inputs_attributes(self, schema, args, kwargs):
        if schema is None:
            return args, kwargs
        return param_manipulation.separate_input_attributes_from_arguments(
            _signature(schema), list(args), kwargs, fill_defaults=False, allow_extra_args=False)


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
