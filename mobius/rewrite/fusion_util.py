"""Small helpers shared by the rewrite rules (names, emitted nodes, small constants)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir


def derived_name(node: ir.Node, op_type: str) -> str | None:
    """``<node's name>/<op_type>`` for the fused node; None (the graph names it) if unnamed."""
    return f"{node.name}/{op_type}" if node.name else None


def take_over(old: ir.Value, new: ir.Value) -> None:
    """Makes ``new`` replace ``old`` everywhere, graph outputs included (keeping their names)."""
    new.type, new.shape = old.type, old.shape
    name = old.name
    was_output = old.is_graph_output()
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if was_output:
        old.name = None
        new.name = name


def emit(nodes: list[ir.Node], op_type: str, inputs, **attributes) -> ir.Value:
    """Creates a default-domain node, appends it to ``nodes`` and returns its output."""
    node = ir.Node("", op_type, inputs, attributes=ir.convenience.convert_attributes(attributes))
    nodes.append(node)
    return node.outputs[0]


def constant(graph: ir.Graph, value) -> ir.Value:
    """A small constant as a main-graph initializer, shared by every rule that asks for it.

    Named after dtype, rank and values, so equal constants are one initializer.
    Python scalars and lists become int64.
    """
    array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.int64)
    values = "_".join(str(x) for x in array.reshape(-1))
    name = f"mobius_const_{array.dtype}_r{array.ndim}_{values}".replace("-", "m")
    existing = graph.initializers.get(name)
    if existing is not None:
        return existing
    tensor = ir.tensor(array)
    init = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape),
                    const_value=tensor)
    graph.register_initializer(init)
    return init

