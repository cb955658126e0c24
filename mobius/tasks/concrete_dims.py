"""What ``TaskFlags.use_concrete_dims`` guarantees, enforced on a finished graph.

For runtimes that plan memory ahead of time (WebGPU via onnxruntime-web,
graph capture), a graph built with ``use_concrete_dims`` must satisfy:

1. **Graph I/O**: every dim fixed by the config (head counts, head size,
   vocabulary, hidden size) is an int; every other dim is one of the task's
   named dims (for the decoder: ``batch_size``, ``sequence_length``,
   ``total_sequence_length``, ``past_sequence_length``). No anonymous or
   unknown dims, and one name means one run-time size, so a runtime can pin
   them by name (onnxruntime-web ``freeDimensionOverrides``).
2. **value_info**: every value produced and read in the main graph carries a
   dtype and a shape of known rank (so it is written as value_info). Dims are
   ints where inferable and carry an input's name where ONNX shape inference
   ties them to it; only data-dependent lengths (a ``Range``'s, say) stay
   unknown.

:func:`check_io_dims` is run by the task right after building (a contract
violation is a bug in the task); :func:`apply_concrete_dims` is run again by
the builder after ``optimize_model``, because rewrite rules add values (and may
retype I/O) after the task is done.
"""

from __future__ import annotations

import logging
from typing import Iterable

import onnx
import onnx_ir as ir

try:  # strips large weights around an onnx C-API call (what ShapeInferencePass uses)
    from onnx_ir.passes.common import _c_api_utils
except ImportError:  # pragma: no cover - onnx-ir moved it: node-by-node inference still runs
    _c_api_utils = None

logger = logging.getLogger(__name__)


def io_dim_problems(model: ir.Model, named_dims: Iterable[str]) -> list[str]:
    """Graph I/O dims that break guarantee 1, as readable strings (empty if none)."""
    allowed = frozenset(named_dims)
    problems = []
    for kind, values in (("input", model.graph.inputs), ("output", model.graph.outputs)):
        for value in values:
            if value.is_initializer():
                continue
            if value.shape is None:
                problems.append(f"{kind} {value.name!r} has no shape")
                continue
            for axis, dim in enumerate(value.shape):
                if isinstance(dim, int):
                    continue
                name = dim.value if isinstance(dim, ir.SymbolicDim) else None
                if not isinstance(name, str) or name not in allowed:
                    problems.append(f"{kind} {value.name!r} dim {axis} is {name!r}, "
                                    f"not an int or one of {sorted(allowed)}")
    return problems


def check_io_dims(model: ir.Model, named_dims: Iterable[str]) -> None:
    problems = io_dim_problems(model, named_dims)
    if problems:
        raise ValueError("use_concrete_dims: graph I/O breaks the contract: " + "; ".join(problems))


def values_without_shape(model: ir.Model) -> list[ir.Value]:
    """Main-graph values read by a node that lack a dtype or a known-rank shape (guarantee 2).

    Unread outputs (the optional statistics outputs of a fused norm, say) are
    not values a runtime plans for, so they do not count.
    """
    return [value for node in model.graph for value in node.outputs
            if (value.uses() or value.is_graph_output())
            and (value.type is None or value.shape is None)]


def infer_value_shapes(model: ir.Model) -> int:
    """Fills missing dtypes/shapes/dims by ONNX shape inference; returns how many values changed.

    Whole-model inference (with data propagation, which carries input dim
    names through shape arithmetic) runs first; where it fails -- one custom
    op whose function body onnx cannot type is enough -- or leaves gaps,
    standard-domain nodes are inferred one at a time in graph order.
    Fill-only: a dtype, shape or dim already set (the task's names, a rule's
    annotation) is never overwritten, and graph outputs are left alone.
    Large weights are not read (they are stripped for the inference call).
    """
    changed = 0
    try:
        if _c_api_utils is None:
            raise RuntimeError("onnx_ir.passes.common._c_api_utils is unavailable")
        proto = _c_api_utils.call_onnx_api(
            lambda p: onnx.shape_inference.infer_shapes(p, check_type=False, strict_mode=True,
                                                        data_prop=True), model)
    except Exception as e:  # noqa: BLE001 - fall back to node-by-node inference below
        logger.info("whole-model shape inference failed (%s); inferring node by node", e)
    else:
        # only the value infos of incomplete values are read back: deserializing the whole
        # inferred graph was most of this function's time
        inferred = {info.name: info for info in proto.graph.value_info}
        for node in model.graph:
            for value in node.outputs:
                info = inferred.get(value.name)
                if info is not None and _incomplete(value):
                    changed += _fill(value, ir.serde.deserialize_type_proto_for_type(info.type),
                                     ir.serde.deserialize_type_proto_for_shape(info.type))
    opsets = dict(model.opset_imports)
    for node in model.graph:
        if node.domain not in ("", "ai.onnx") or not any(_incomplete(v) for v in node.outputs):
            continue
        for value, (type_, shape) in _infer_node(node, opsets).items():
            changed += _fill(value, type_, shape)
    return changed


def _incomplete(value: ir.Value) -> bool:
    return value.type is None or value.shape is None or any(
        isinstance(d, ir.SymbolicDim) and d.value is None for d in value.shape)


def _fill(value: ir.Value, type_, shape) -> bool:
    if value.is_graph_output():
        return False
    touched = False
    if value.type is None and type_ is not None:
        value.type = type_
        touched = True
    if shape is not None:
        if value.shape is None:
            value.shape = shape
            touched = True
        elif len(value.shape) == len(shape):
            dims = [_better(a, b) for a, b in zip(value.shape, shape)]
            if dims != list(value.shape):
                value.shape = ir.Shape(dims)
                touched = True
    return touched


def _infer_node(node: ir.Node, opsets: dict) -> dict:
    """{output value: (type, shape)} from onnx's per-node inference, {} when it cannot run."""
    input_types = {}
    input_data = {}
    for x in node.inputs:
        if x is None:
            continue
        if x.type is None:
            return {}
        type_proto = ir.serde.serialize_type(x.type)
        if x.shape is not None:
            ir.serde.serialize_shape_into(type_proto, x.shape)
        input_types[x.name] = type_proto
        if x.const_value is not None and x.const_value.size <= 64:
            input_data[x.name] = ir.serde.serialize_tensor(x.const_value)
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get(node.domain, opsets.get("", 1)),
                                      node.domain)
        types = onnx.shape_inference.infer_node_outputs(
            schema, ir.serde.serialize_node(node), input_types, input_data)
    except Exception:  # noqa: BLE001 - unknown op / bad input types: leave as is
        return {}
    result = {}
    for value in node.outputs:
        proto = types.get(value.name)
        if proto is not None:
            result[value] = (ir.serde.deserialize_type_proto_for_type(proto),
                             ir.serde.deserialize_type_proto_for_shape(proto))
    return result


def apply_concrete_dims(model: ir.Model, named_dims: Iterable[str]) -> None:
    """Enforces both guarantees on a finished graph (raises on an I/O contract violation)."""
    infer_value_shapes(model)
    check_io_dims(model, named_dims)
    missing = values_without_shape(model)
    if missing:
        logger.warning("use_concrete_dims: %d value(s) have no inferable shape: %s", len(missing),
                       ", ".join(str(v.name) for v in missing[:10]))


def _better(ours, theirs):
    """Keep our dim unless it is unknown and inference knows more."""
    if isinstance(ours, int):
        return ours
    if isinstance(ours, ir.SymbolicDim) and ours.value is not None:
        return ours
    if isinstance(theirs, int):
        return theirs
    if isinstance(theirs, ir.SymbolicDim) and theirs.value is not None:
        return theirs.value
    return ours
