"""Attaching specialized function bodies to custom-op nodes.

A body depends on the node's attributes (head counts, rotary on/off ...), so
each distinct attribute set becomes its own function *overload*
(ONNX IR >= 10); nodes with identical attributes share one.

Bodies are built once per process and cloned for each model (a clone costs a third of a
build, and every model of a package, and every package of a batch, asks for the same few).
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

import onnx_ir as ir

from mobius.graph_builder import build_function

MS_DOMAIN = "com.microsoft"
OPSET = 23

#: (domain, op, overload, input types) -> the body built for them; never handed out, only
#: its clones (a model's passes may edit its functions)
_BUILT: dict[Hashable, ir.Function] = {}


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
    present = [node.inputs[i] is not None for i in range(len(input_types))]
    built_key = (*key, tuple(zip(present, input_types)))
    if built_key not in _BUILT:
        inputs = [ir.Value(name=f"input_{i}", type=t) if here else None
                  for i, (here, t) in enumerate(zip(present, input_types))]
        function = build_function(body, inputs, domain=node.domain, name=node.op_type,
                                  opset=OPSET)
        function.overload = overload
        _BUILT[built_key] = function
    model.functions[key] = _BUILT[built_key].clone()
