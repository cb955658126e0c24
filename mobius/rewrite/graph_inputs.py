"""Finding contract-named graph inputs (DESIGN.md's graph contract)."""

from __future__ import annotations

import onnx_ir as ir


def graph_input(graph: ir.Graph, name: str) -> ir.Value | None:
    for value in graph.inputs:
        if value.name == name:
            return value
    return None


def attention_mask_input(graph: ir.Graph) -> ir.Value | None:
    return graph_input(graph, "attention_mask")
