"""Small helpers shared by the fusion rules that replace a subgraph by one node."""

from __future__ import annotations

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
