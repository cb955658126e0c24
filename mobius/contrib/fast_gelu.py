"""com.microsoft FastGelu and its standard-ONNX body.

    Y = FastGelu(X[, bias])  # bias: 1-D, broadcast over X's last axis

is the tanh approximation of Gelu of ``X + bias``,
``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``, i.e.
``Gelu(Add(X, bias), approximate="tanh")``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "FastGelu"
INPUT_NAMES = ("X", "bias")
OUTPUT_NAMES = ("Y",)


def make_fast_gelu_node(model: ir.Model, inputs: list, name: str | None) -> ir.Node:
    """Creates (not inserts) a FastGelu node that carries its function body.

    ``inputs`` is ``[X]`` or ``[X, bias]``.
    """
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, num_outputs=1, name=name)
    types = [v.type for v in inputs]
    overload = "bias" if len(inputs) > 1 and inputs[1] is not None else "nobias"
    attach_function(model, node, _body, types, overload)
    return node


def _body(op, x, bias=None):
    if bias is not None:
        x = op.Add(x, bias)
    return op.Gelu(x, approximate="tanh")
