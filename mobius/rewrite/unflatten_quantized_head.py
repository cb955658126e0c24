"""Fuse: a quantized LM head reads the 3-D hidden states directly.

    Reshape(MatMulNBits(Reshape(x, [-1, H]), ...)[ + b], [..., V])  ->  MatMulNBits(x, ...)[ + b]

The LM head is a Gemm (mobius/components/lm_head.py), which takes 2-D rows
only, so the model flattens the hidden states before it and restores the
leading dims after it. Once QuantizeLinears has turned that Gemm into a
MatMulNBits, or a MatMul reading a DequantizeLinear, both of which take
any leading dims, the two Reshapes only cost: ONNX Runtime copies the
restored logits into the graph output (at 128 prompt tokens and a 32000
vocabulary, 16 MiB and a few ms of every prefill).

Legal where the build quantizes (``ctx.quant``); it runs after QuantizeLinears.
The outer Reshape must restore exactly ``x``'s leading dims (its shape is
``Concat(Shape(x, end=-1), [N])``, as the head emits it).
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.rewrite.fusion_util import take_over
from mobius.rewrite.rule import NodeRule, Rejected, RuleContext, attr, initializer_array, producer

MS_DOMAIN = "com.microsoft"


@dataclasses.dataclass
class _Match:
    restore: ir.Node  # Reshape back to [..., N]
    matmul: ir.Node  # MatMulNBits, or MatMul(rows, DequantizeLinear(...))
    bias: ir.Node | None  # Add(matmul, b[N]) between them
    x: ir.Value  # the hidden states before the flattening Reshape


class UnflattenQuantizedHead(NodeRule):
    name = "UnflattenQuantizedHead"
    stage = "fuse"
    order = 110

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.quant is not None

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "Reshape" or node.domain != "":
            return None
        bias = producer(node.inputs[0], "Add")
        product = bias.inputs[0] if bias is not None else node.inputs[0]
        matmul = product.producer() if product is not None else None
        if matmul is None or not _quantized_matmul(matmul):
            return None
        flatten = producer(matmul.inputs[0], "Reshape")
        if flatten is None:
            return None
        return _Match(node, matmul, bias, flatten.inputs[0])

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        rows, product = match.matmul.inputs[0], match.matmul.outputs[0]
        if len(rows.uses()) != 1 or len(product.uses()) != 1:
            return Rejected("the flattened rows or the product have other readers")
        if match.bias is not None and (len(match.bias.outputs[0].uses()) != 1
                                       or not _vector(match.bias.inputs[1])):
            return Rejected("the bias is not a constant vector read once")
        hidden = match.x.shape[-1] if match.x.shape is not None and len(match.x.shape) else None
        flat = initializer_array(rows.producer().inputs[1])
        if not isinstance(hidden, int) or flat is None or flat.tolist() != [-1, hidden]:
            return Rejected("the flatten is not a Reshape to [-1, hidden]")
        if not _restores_leading_dims(match.restore.inputs[1], match.x):
            return Rejected("the last Reshape does not restore the input's leading dims")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        match.matmul.replace_input_with(0, match.x)
        last = match.bias if match.bias is not None else match.matmul
        take_over(match.restore.outputs[0], last.outputs[0])


def _quantized_matmul(node: ir.Node) -> bool:
    """A MatMulNBits, or a MatMul whose weight is a DequantizeLinear: both broadcast over
    leading dims of their input, unlike the Gemm they replaced."""
    if node.op_type == "MatMulNBits" and node.domain == MS_DOMAIN:
        return True
    return (node.op_type == "MatMul" and node.domain == ""
            and producer(node.inputs[1], "DequantizeLinear") is not None)


def _vector(value: ir.Value | None) -> bool:
    return value is not None and value.shape is not None and len(value.shape) == 1


def _restores_leading_dims(shape: ir.Value, x: ir.Value) -> bool:
    """``shape`` = Concat(Shape(x, end=-1), [N]): x's own leading dims, then N."""
    concat = producer(shape, "Concat")
    if concat is None or len(concat.inputs) != 2:
        return False
    leading = producer(concat.inputs[0], "Shape")
    if leading is None or leading.inputs[0] is not x or attr(leading, "start", 0) != 0:
        return False
    tail = initializer_array(concat.inputs[1])
    return attr(leading, "end", None) == -1 and tail is not None and tail.size == 1
