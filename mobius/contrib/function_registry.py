"""Attaching specialized function bodies to custom-op nodes.

A body depends on the node's attributes (head counts, rotary on/off ...), so
each distinct attribute set becomes its own function *overload*
(ONNX IR >= 10); nodes with identical attributes share one.
"""

from __future__ import annotations

from typing import Callable, Sequence

import onnx_ir as ir

from mobius.graph_builder import build_function

MS_DOMAIN = "com.microsoft"
OPSET = 23


def attach_function(
    model: ir.Model,
    node: ir.Node,
    body: Callable,
    input_types: Sequence[ir.TypeProtocol | None],
    overload: str,
) -> None:
    """Makes ``node`` call a model-local function named like its op, built by ``body``."""
    node.overload = overload
    key = (node.domain, node.op_type, overload)
    model.opset_imports.setdefault(node.domain, 1)
    model.opset_imports.setdefault("", OPSET)
    if key in model.functions:
        return
    # Presence comes from the node (an input may be present with an unknown type).
    inputs = [
        ir.Value(name=f"input_{i}", type=t) if node.inputs[i] is not None else None
        for i, t in enumerate(input_types)
    ]
    function = build_function(body, inputs, domain=node.domain, name=node.op_type, opset=OPSET)
    function.overload = overload
    model.functions[key] = function
