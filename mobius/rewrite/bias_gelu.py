"""Fuse: Add(x, bias) + Gelu -> com.microsoft BiasGelu / FastGelu.

Patterns (``bias`` a 1-D constant of x's last dimension; the sum has one use):
    Gelu(Add(x, bias))                        -> BiasGelu(x, bias)
    Gelu(Add(x, bias), approximate="tanh")    -> FastGelu(x, bias)
Gelu itself comes from the model (activations emit the standard op) or from
GeluFusion, which therefore runs first in the fuse stage.

Legality: ``caps.has_kernel("BiasGelu")`` / ``caps.has_kernel("FastGelu")``,
float dtypes, every role: BiasGelu/FastGelu are standalone elementwise
kernels whose availability is exactly what ``contrib_ops`` lists (the
kernel-set check is what keeps "never fuse what the EP will decompose"
true). For the built-in
EPs this fuses on cpu, cuda, dml and webgpu, and not on default, mlx,
trt-rtx or onnx-standard.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.contrib.bias_gelu import OP_TYPE as BIAS_GELU
from mobius.contrib.bias_gelu import make_bias_gelu_node
from mobius.contrib.fast_gelu import OP_TYPE as FAST_GELU
from mobius.contrib.fast_gelu import make_fast_gelu_node
from mobius.rewrite.fusion_util import derived_name, take_over
from mobius.rewrite.rule import NodeRule, Rejected, RuleContext, attr, producer, sole_consumer

#: Tensor dtypes both kernels' schemas accept (type constraint T).
BIAS_GELU_DTYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16})

_KERNEL = {"none": BIAS_GELU, "tanh": FAST_GELU}


@dataclasses.dataclass
class _Match:
    gelu: ir.Node
    x: ir.Value
    bias: ir.Value
    op_type: str


class BiasGeluFusion(NodeRule):
    name = "BiasGeluFusion"
    stage = "fuse"
    order = 70

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.dtype in BIAS_GELU_DTYPES and any(
            ctx.caps.has_kernel(kernel) for kernel in _KERNEL.values())

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "Gelu" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 1:
            return None
        op_type = _KERNEL.get(attr(node, "approximate", "none"))
        add = producer(node.inputs[0], "Add")
        if op_type is None or add is None or sole_consumer(add.outputs[0]) is not node:
            return None
        if len(add.inputs) != 2 or any(v is None for v in add.inputs):
            return None
        for x, bias in (add.inputs, reversed(add.inputs)):
            if _is_bias_for(bias, x):
                return _Match(node, x, bias, op_type)
        return None

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        if not ctx.caps.has_kernel(match.op_type):
            return Rejected(f"the EP has no {match.op_type} kernel")
        if match.x.dtype not in BIAS_GELU_DTYPES:
            return Rejected(f"input dtype {match.x.dtype} has no fused kernel")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        make = make_bias_gelu_node if match.op_type == BIAS_GELU else make_fast_gelu_node
        fused = make(model, [match.x, match.bias],
                     name=derived_name(match.gelu, match.op_type))
        model.graph.insert_before(match.gelu, fused)
        take_over(match.gelu.outputs[0], fused.outputs[0])


def _constant_info(value: ir.Value) -> tuple[tuple[int, ...], ir.DataType] | None:
    """(shape, dtype) of a constant (initializer or Constant node), without reading its data."""
    tensor = value.const_value
    if tensor is None:
        node = producer(value, "Constant")
        tensor = attr(node, "value") if node is not None else None
    if tensor is None:
        return None
    return tuple(tensor.shape), tensor.dtype


def _is_bias_for(bias: ir.Value, x: ir.Value) -> bool:
    """A 1-D constant as long as x's (static) last dim, same dtype: no broadcast beyond x."""
    info = _constant_info(bias)
    if info is None or len(info[0]) != 1 or info[1] != x.dtype:
        return False
    if x.shape is None or len(x.shape) < 1 or _constant_info(x) is not None:
        return False
    last = x.shape[-1]
    return isinstance(last, int) and last == info[0][0]
