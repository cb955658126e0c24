"""com.microsoft QuickGelu and its standard-ONNX body.

    Y = QuickGelu(X, alpha=a)

is ``X * Sigmoid(a * X)`` (CLIP's activation, a = 1.702).
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "QuickGelu"


def make_quick_gelu_node(model: ir.Model, x: ir.Value, alpha: float,
                         name: str | None) -> ir.Node:
    """Creates (not inserts) a QuickGelu node that carries its function body."""
    node = ir.Node(MS_DOMAIN, OP_TYPE, [x], num_outputs=1, name=name,
                   attributes=[ir.AttrFloat32("alpha", alpha)])
    attach_function(model, node, lambda op, v: _body(op, alpha, v), [x.type],
                    f"a{alpha!r}")
    return node


def _body(op, alpha: float, x):
    return op.Mul(x, op.Sigmoid(op.Mul(x, op.CastLike(op.Constant(value_float=alpha), x))))
