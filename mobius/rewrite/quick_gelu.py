"""Fuse: x * Sigmoid(alpha * x) -> com.microsoft QuickGelu(x, alpha=alpha).

Pattern (operands of either Mul in either order; ``alpha`` a scalar constant):
    s = Sigmoid(Mul(x, alpha))
    y = Mul(x, s)
Rewrite:
    y = QuickGelu(x, alpha=alpha)
CLIP's quick_gelu (alpha 1.702). The scaled product and the sigmoid must have no
other reader. A plain SiLU (``x * Sigmoid(x)``, no alpha) is left alone: it is
not what this rule is for, and decoders' SwiGLU MLPs are matched elsewhere.

Legality: ``caps.has_kernel("QuickGelu")`` and a dtype the EP computes natively
(a bf16 build on CPU is computed in f32 by a later lowering), every role.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.contrib.quick_gelu import OP_TYPE, make_quick_gelu_node
from mobius.rewrite.fusion_util import derived_name, take_over
from mobius.rewrite.rule import (NodeRule, Rejected, RuleContext, initializer_array, producer,
                                  sole_consumer)


@dataclasses.dataclass
class _Match:
    mul: ir.Node
    x: ir.Value
    alpha: float


class QuickGeluFusion(NodeRule):
    name = "QuickGeluFusion"
    stage = "fuse"
    order = 90

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.caps.has_kernel(OP_TYPE) and ctx.caps.computes(ctx.dtype)

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "Mul" or node.domain != "" or len(node.inputs) != 2:
            return None
        for x, gate in (node.inputs, reversed(node.inputs)):
            sigmoid = producer(gate, "Sigmoid")
            if sigmoid is None or sole_consumer(gate) is not node:
                continue
            alpha = _scaled(sigmoid.inputs[0], x)
            if alpha is not None and sole_consumer(sigmoid.inputs[0]) is sigmoid:
                return _Match(node, x, alpha)
        return None

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        if match.x.dtype != ctx.dtype:
            return Rejected(f"input dtype {match.x.dtype} is not the build dtype {ctx.dtype}")
        if match.x.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
            return Rejected(f"input dtype {match.x.dtype} has no QuickGelu kernel")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        fused = make_quick_gelu_node(model, match.x, match.alpha,
                                     name=derived_name(match.mul, OP_TYPE))
        model.graph.insert_before(match.mul, fused)
        take_over(match.mul.outputs[0], fused.outputs[0])


def _scaled(value: ir.Value, x: ir.Value) -> float | None:
    """alpha if ``value`` is Mul(x, alpha) or Mul(alpha, x) with a scalar constant alpha."""
    mul = producer(value, "Mul")
    if mul is None or len(mul.inputs) != 2:
        return None
    for operand, constant in (mul.inputs, reversed(mul.inputs)):
        if operand is not x:
            continue
        array = initializer_array(constant)
        if array is not None and array.size == 1 and np.issubdtype(array.dtype, np.floating):
            return float(array.reshape(()))
    return None
