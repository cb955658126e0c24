"""Standalone ONNX graphs around one mobius component, for component unit tests.

    with build_context(None, ir.DataType.FLOAT):
        linear = Linear(8, 5, bias=True)
    attach_arrays(linear, {"weight": w, "bias": b}, tmp_path)   # checkpoint layout
    model = component_model(
        inputs=[("x", ir.DataType.FLOAT, [2, 3, 8])],
        forward=lambda op, x: linear(op, x),
        outputs=["y"],
    )
    (y,) = run_model(model, {"x": x})        # checker (full) + onnxruntime

The graph is opset 23 with GraphBuilder, exactly as mobius/tasks/causal_lm.py
builds the real decoder. Weights go through the real loading path
(safetensors file -> SafetensorsCheckpoint -> attach_weights), so a wrong
transform or dtype conversion fails the component test.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir
from onnxscript._internal.builder import GraphBuilder

OPSET = 23


def attach_arrays(module, arrays: Mapping[str, np.ndarray], folder: str | os.PathLike) -> None:
    """Writes ``arrays`` (checkpoint names and layouts) as safetensors and attaches them."""
    from mobius.weights.attach import attach_weights
    from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
    from mobius.weights.safetensors_writer import write_safetensors

    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"),
                      {k: np.asarray(v, order="C") for k, v in arrays.items()})  # keeps 0-d
    attach_weights(module, SafetensorsCheckpoint(str(folder)))


def component_model(
    inputs: Sequence[tuple[str, ir.DataType, Sequence[int | str | None]]],
    forward: Callable,
    outputs: Sequence[str | tuple[str, Sequence[int | str | None]]],
    opset: int = OPSET,
) -> ir.Model:
    """A model whose graph is ``forward(op, *inputs)``; outputs named as given.

    An output is a name, or (name, shape) where the builder's inference leaves
    the shape unknown (e.g. the KV outputs of the Attention op).
    """
    graph = ir.Graph([], [], nodes=[], opset_imports={"": opset}, name="component")
    builder = GraphBuilder(graph)
    op = builder.op
    values = [builder.input(name, dtype, list(shape)) for name, dtype, shape in inputs]
    results = forward(op, *values)
    if isinstance(results, ir.Value):
        results = (results,)
    results = list(results)
    assert len(results) == len(outputs), (len(results), outputs)
    for value, output in zip(results, outputs):
        name, shape = (output, None) if isinstance(output, str) else output
        if value.producer() is None or value in graph.outputs:
            value = op.Identity(value)
        builder.add_output(value, name)
        if shape is not None:
            value.shape = ir.Shape(list(shape))
        # ONNX requires a graph output's rank; give the shape where inference had none.
        assert value.shape is not None, f"output {name!r}: pass (name, shape) in outputs"
    return ir.Model(graph, ir_version=10, producer_name="mobius-tests")


def to_proto(model: ir.Model, check: bool = True) -> onnx.ModelProto:
    """Serializes (loading lazy weights) and runs the full ONNX checker + shape inference."""
    proto = ir.serde.serialize_model(model)
    if check:
        onnx.checker.check_model(proto, full_check=True)
    return proto


def run_model(model: ir.Model, feeds: Mapping[str, np.ndarray], check: bool = True,
              optimization_level=None):
    """Checks the model and runs it in onnxruntime (CPU); returns the outputs in order.

    ``optimization_level``: an ``onnxruntime.GraphOptimizationLevel`` (default: ORT's,
    ORT_ENABLE_ALL)."""
    import onnxruntime as ort

    proto = to_proto(model, check)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # tiny graphs; two tests share two cores under Bazel
    if optimization_level is not None:
        options.graph_optimization_level = optimization_level
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def run_reference(model: ir.Model, feeds: Mapping[str, np.ndarray], check: bool = True):
    """Same as :func:`run_model` with onnx.reference (runs bfloat16, unlike ORT's CPU EP)."""
    from onnx.reference import ReferenceEvaluator

    proto = to_proto(model, check)
    return [np.asarray(o) for o in ReferenceEvaluator(proto).run(None, dict(feeds))]


def output_types(model: ir.Model) -> dict[str, ir.DataType]:
    proto = to_proto(model, check=False)
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    return {o.name: ir.DataType(o.type.tensor_type.elem_type) for o in inferred.graph.output}
