"""LoRA A/B matrices as decoder inputs, for adapters loaded at run time.

Each targeted Linear ``y = x @ W`` becomes ``y = x @ W + (x @ A) @ B`` with
``<module>.lora_A`` [in, <module>.lora_rank] and ``<module>.lora_B``
[<module>.lora_rank, out] graph inputs (a rank dim per module: onnxruntime
plans buffer reuse by dim name, so one shared name would let an adapter's
rank-4 product reuse the buffer of a module it leaves at rank 0). They are added to the generic graph, before the EP pipeline, so
every fusion sees them as what they are (activations, never weights to fold or
quantize); after it, each input gets an empty (rank 0) initializer of the same
name: onnxruntime uses it when the caller binds nothing, so with no adapter
active the product is zero-width and the Linear is the base one.
onnxruntime-genai's ``Adapters`` binds a loaded adapter's tensors by these names.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.errors import WeightsError
from mobius.weights.attach import CHECKPOINT_NAME

_LORA_INPUTS = "mobius.lora_inputs"


def lora_input_names(weight: str) -> tuple[str, str]:
    """The (A, B) input names of the Linear reading checkpoint tensor ``weight``."""
    module = weight.removesuffix(".weight")
    return f"{module}.lora_A", f"{module}.lora_B"


def add_lora_inputs(model: ir.Model, targets: dict[str, tuple[int, int]]) -> None:
    """Adds the LoRA path to the MatMul of every targeted checkpoint weight."""
    graph = model.graph
    found = _matmuls(graph, targets)
    missing = sorted(set(targets) - set(found))
    if missing:
        raise WeightsError(f"adapter targets {missing[0]!r}, which this model does not read as "
                           f"one whole Linear (a fused or sliced projection?); merge the "
                           f"adapter instead (--adapter-mode merged)")
    added = []
    for weight, node in found.items():
        x, w = node.inputs[0], node.inputs[1]
        if tuple(w.shape) != targets[weight]:
            raise WeightsError(f"adapter targets {weight!r} of shape {list(targets[weight])} "
                               f"but the model reads it as {list(w.shape)}")
        a_name, b_name = lora_input_names(weight)
        rank = weight.removesuffix(".weight") + ".lora_rank"
        a = ir.Value(name=a_name, type=w.type, shape=ir.Shape([w.shape[0], rank]))
        b = ir.Value(name=b_name, type=w.type, shape=ir.Shape([rank, w.shape[1]]))
        graph.inputs.extend([a, b])
        down = ir.node("MatMul", [x, a], name=f"{a_name}/MatMul")
        up = ir.node("MatMul", [down.outputs[0], b], name=f"{b_name}/MatMul")
        add = ir.node("Add", [node.outputs[0], up.outputs[0]], name=f"{b_name}/Add")
        node.outputs[0].replace_all_uses_with(add.outputs[0], replace_graph_outputs=True)
        add.replace_input_with(0, node.outputs[0])
        add.outputs[0].type, add.outputs[0].shape = node.outputs[0].type, node.outputs[0].shape
        graph.insert_after(node, [down, up, add])
        added += [a_name, b_name]
    graph.meta[_LORA_INPUTS] = added


def add_lora_defaults(model: ir.Model) -> None:
    """Gives every LoRA input its empty (no adapter) initializer."""
    graph = model.graph
    names = set(graph.meta.get(_LORA_INPUTS, ()))
    for value in graph.inputs:
        if value.name not in names:
            continue
        shape = [d if isinstance(d, int) else 0 for d in value.shape]
        dtype = value.type.dtype.numpy()
        value.const_value = ir.tensor(np.zeros(shape, dtype), name=value.name)
        graph.register_initializer(value)


def _matmuls(graph: ir.Graph, targets) -> dict[str, ir.Node]:
    """Checkpoint weight -> the sole MatMul that reads it (as its right operand)."""
    found: dict[str, list[ir.Node]] = {}
    for node in graph:
        if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2:
            continue
        w = node.inputs[1]
        tensor = w.const_value if w is not None else None
        source = tensor.meta.get(CHECKPOINT_NAME) if tensor is not None else None
        if source in targets:
            found.setdefault(source, []).append(node)
    return {weight: nodes[0] for weight, nodes in found.items() if len(nodes) == 1}
