"""com.microsoft BiasGelu and its standard-ONNX body.

    C = BiasGelu(A, B)      # B: 1-D, broadcast over A's last axis

is ``Gelu(A + B)`` with the exact (erf) Gelu: ``Gelu(Add(A, B), approximate="none")``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "BiasGelu"
INPUT_NAMES = ("A", "B")
OUTPUT_NAMES = ("C",)


def make_bias_gelu_node(model: ir.Model, inputs: list, name: str | None) -> ir.Node:
    """Creates (not inserts) a BiasGelu node that carries its function body."""
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, num_outputs=1, name=name)
    types = [v.type for v in inputs]
    attach_function(model, node, _body, types, "")
    return node


def _body(op, a, b):
    return op.Gelu(op.Add(a, b), approximate="none")
