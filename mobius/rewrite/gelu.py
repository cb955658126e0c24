"""Fuse: the elementwise Gelu formulas -> the standard ONNX Gelu op (opset 20).

Patterns (``x`` any float tensor; every intermediate has one use):
    erf:   0.5 * x * (1 + Erf(x / sqrt(2)))                  -> Gelu(x)
    tanh:  0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
                                                              -> Gelu(x, approximate="tanh")
Variants recognized:
    * Erf argument: ``Div(x, 1.4142...)`` or ``Mul(x, 0.7071...)`` (either order);
    * the cube: ``Pow(x, 3)``, ``x * (x * x)``, ``(x * x) * x``; or the factored
      ``x * (1 + 0.044715 * x * x)`` for ``x + 0.044715 * x^3``;
    * ``1 + t`` in either order; every Mul with its operands in either order;
    * the product of ``x``, ``0.5`` and ``1 + t`` in any association:
      ``(x * s) * 0.5``, ``(s * 0.5) * x``, ``s * (x * 0.5)``, with ``* 0.5``
      also spelled ``/ 2``.
Constants are scalars (or single-element tensors that do not broadcast the
result to a higher rank) within a relative 1e-3 of the exact value, so
rounded spellings (1.414, 0.7071, f16 constants) match.

Gelu is a standard op, so this rule is legal on every EP, dtype and role;
it only needs the model's default-domain opset to be >= 20 (mobius builds
opset 23). It runs before BiasGeluFusion, which consumes Gelu.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir

from mobius.rewrite.fusion_util import derived_name, take_over
from mobius.rewrite.rule import NodeRule, Rejected, RuleContext, initializer_array, sole_consumer

GELU_OPSET = 20
_RTOL = 1e-3
_FLOAT_TYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16,
                          ir.DataType.DOUBLE})


@dataclasses.dataclass
class _Match:
    x: ir.Value
    output: ir.Value
    last: ir.Node
    approximate: str


class GeluFusion(NodeRule):
    name = "GeluFusion"
    stage = "fuse"
    order = 60

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        if model.opset_imports.get("", 0) < GELU_OPSET:
            return 0
        return super().apply(model, ctx)

    def match(self, node: ir.Node) -> _Match | None:
        if node.domain not in ("", "ai.onnx") or len(node.inputs) != 1:
            return None
        if node.op_type == "Erf":
            x, approximate = _erf_argument(node.inputs[0]), "none"
        elif node.op_type == "Tanh":
            x, approximate = _tanh_argument(node.inputs[0]), "tanh"
        else:
            return None
        if x is None:
            return None
        one_plus = _one_plus(node.outputs[0], x)
        if one_plus is None:
            return None
        found = _times_x_half(one_plus, x)
        if found is None:
            return None
        last, output = found
        return _Match(x, output, last, approximate)

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        if match.x.dtype not in _FLOAT_TYPES:
            return Rejected(f"input dtype {match.x.dtype} is not a float type")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        gelu = ir.Node("", "Gelu", [match.x],
                       attributes=[ir.AttrString("approximate", match.approximate)],
                       name=derived_name(match.last, "Gelu"))
        model.graph.insert_before(match.last, gelu)
        take_over(match.output, gelu.outputs[0])


# --- pattern pieces -----------------------------------------------------------------------


def _is_op(node: ir.Node | None, op_type: str) -> bool:
    return (node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx")
            and len(node.inputs) == 2 and all(v is not None for v in node.inputs))


def _constant_near(value: ir.Value, target: float, like: ir.Value) -> bool:
    """``value`` is a single-element constant ~= target, not raising ``like``'s rank."""
    if value.const_value is not None and value.const_value.size != 1:
        return False  # a weight: never read (weights stay lazy until saving)
    array = initializer_array(value)
    if array is None or array.size != 1:
        return False
    if array.ndim and (like.shape is None or array.ndim > len(like.shape)):
        return False
    return math.isclose(float(np.asarray(array, dtype=np.float64).reshape(())), target,
                        rel_tol=_RTOL)


def _split_const(node: ir.Node, target: float, like: ir.Value) -> ir.Value | None:
    """For a binary node with one operand ~= target: the other operand."""
    a, b = node.inputs
    if _constant_near(b, target, like):
        return a
    if _constant_near(a, target, like):
        return b
    return None


def _intermediate(value: ir.Value, op_type: str) -> ir.Node | None:
    """The producer of ``value`` if it is a binary ``op_type`` and ``value`` has one use."""
    node = value.producer()
    if not _is_op(node, op_type) or sole_consumer(value) is None:
        return None
    return node


def _erf_argument(z: ir.Value) -> ir.Value | None:
    """x for ``z = x / sqrt(2)`` (Div) or ``z = x * (1/sqrt(2))`` (Mul)."""
    node = _intermediate(z, "Div")
    if node is not None:
        return node.inputs[0] if _constant_near(node.inputs[1], math.sqrt(2.0), z) else None
    node = _intermediate(z, "Mul")
    if node is not None:
        return _split_const(node, 1.0 / math.sqrt(2.0), z)
    return None


def _tanh_argument(z: ir.Value) -> ir.Value | None:
    """x for ``z = sqrt(2/pi) * (x + 0.044715 x^3)`` (or its factored form)."""
    scale = _intermediate(z, "Mul")
    if scale is None:
        return None
    inner = _split_const(scale, math.sqrt(2.0 / math.pi), z)
    if inner is None:
        return None
    add = _intermediate(inner, "Add")
    if add is not None:  # x + 0.044715 * x^3
        for x, cubic in (add.inputs, reversed(add.inputs)):
            mul = _intermediate(cubic, "Mul")
            if mul is None:
                continue
            cube = _split_const(mul, 0.044715, cubic)
            if cube is not None and _is_cube(cube, x):
                return x
        return None
    mul = _intermediate(inner, "Mul")  # x * (1 + 0.044715 * x * x)
    if mul is None:
        return None
    for x, factor in (mul.inputs, reversed(mul.inputs)):
        add = _intermediate(factor, "Add")
        if add is None:
            continue
        term = _split_const(add, 1.0, factor)
        scaled = _intermediate(term, "Mul") if term is not None else None
        square = _split_const(scaled, 0.044715, term) if scaled is not None else None
        if square is not None and _is_square(square, x):
            return x
    return None


def _is_square(value: ir.Value, x: ir.Value) -> bool:
    node = _intermediate(value, "Mul")
    if node is not None:
        return node.inputs[0] is x and node.inputs[1] is x
    node = _intermediate(value, "Pow")
    return node is not None and node.inputs[0] is x and _constant_near(node.inputs[1], 2.0, x)


def _is_cube(value: ir.Value, x: ir.Value) -> bool:
    node = _intermediate(value, "Pow")
    if node is not None:
        return node.inputs[0] is x and _constant_near(node.inputs[1], 3.0, x)
    node = _intermediate(value, "Mul")
    if node is None:
        return False
    a, b = node.inputs
    return (a is x and _is_square(b, x)) or (b is x and _is_square(a, x))


def _one_plus(t: ir.Value, x: ir.Value) -> ir.Value | None:
    """``1 + t`` (either order), t's only use."""
    add = sole_consumer(t)
    if not _is_op(add, "Add"):
        return None
    other = add.inputs[1] if add.inputs[0] is t else add.inputs[0]
    if add.inputs[0] is add.inputs[1] or not _constant_near(other, 1.0, x):
        return None
    return add.outputs[0]


def _half_of(value: ir.Value, like: ir.Value) -> ir.Node | None:
    """The only consumer of ``value`` if it computes ``value * 0.5`` or ``value / 2``."""
    node = sole_consumer(value)
    if _is_op(node, "Mul"):
        other = node.inputs[1] if node.inputs[0] is value else node.inputs[0]
        if node.inputs[0] is not node.inputs[1] and _constant_near(other, 0.5, like):
            return node
    if (_is_op(node, "Div") and node.inputs[0] is value
            and _constant_near(node.inputs[1], 2.0, like)):
        return node
    return None


def _times(value: ir.Value, factor: ir.Value) -> ir.Node | None:
    """The only consumer of ``value`` if it computes ``value * factor`` (either order)."""
    node = sole_consumer(value)
    if not _is_op(node, "Mul"):
        return None
    a, b = node.inputs
    return node if (a is value and b is factor) or (b is value and a is factor) else None


def _times_x_half(s: ir.Value, x: ir.Value) -> tuple[ir.Node, ir.Value] | None:
    """(last node, its output) for the product of ``s``, ``x`` and 0.5 in any association."""
    mul = _times(s, x)  # (s * x) * 0.5
    if mul is not None:
        half = _half_of(mul.outputs[0], x)
        return (half, half.outputs[0]) if half is not None else None
    half = _half_of(s, x)  # (s * 0.5) * x
    if half is not None:
        mul = _times(half.outputs[0], x)
        return (mul, mul.outputs[0]) if mul is not None else None
    mul = sole_consumer(s)  # s * (x * 0.5)
    if not _is_op(mul, "Mul") or mul.inputs[0] is mul.inputs[1]:
        return None
    other = mul.inputs[1] if mul.inputs[0] is s else mul.inputs[0]
    node = other.producer()
    if node is None or sole_consumer(other) is not mul:
        return None
    if _is_op(node, "Mul") and x in node.inputs and node.inputs[0] is not node.inputs[1]:
        constant = node.inputs[1] if node.inputs[0] is x else node.inputs[0]
        if _constant_near(constant, 0.5, x):
            return mul, mul.outputs[0]
    if _is_op(node, "Div") and node.inputs[0] is x and _constant_near(node.inputs[1], 2.0, x):
        return mul, mul.outputs[0]
    return None
