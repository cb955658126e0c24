"""Fuse (last): every MatMul with a constant float weight -> the EP's quantized form.

    y = MatMul(x, W[K, N])    ->    MatMulNBits(x, B, scales[, zp])        (quant_form matmul_nbits)
                              ->    MatMul(x, DequantizeLinear(codes, ...)) (dequantize_linear)

A Linear is the only thing that puts a constant 2-D weight on a MatMul, so
this one pass covers every family and every role (decoder, vision, encoder);
attention, MoE and norm structure are untouched. It runs after the fusions
(packed QKV is quantized as one matrix) and before inlining (which expands
MatMulNBits where the EP lacks the kernel). Weights are quantized by RTN when
the saver asks for them (see mobius.quantize.emit). Legal where the build
asked for quantization (``ctx.quant``).
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.quantize.emit import Layout, emit_quantized_matmul
from mobius.quantize.prequantized import emit_prequantized, plan_for, sources_of
from mobius.quantize.rtn import quantize_rtn_kn
from mobius.rewrite.rule import Rule, RuleContext

_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


class QuantizeLinears(Rule):
    name = "QuantizeLinears"

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.quant is not None

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        spec = ctx.quant
        count = 0
        for node in list(model.graph):
            weight = _constant_weight(node)
            if weight is None:
                continue
            sources = sources_of(weight.const_value)
            if sources is not None:  # GPTQ / AWQ integers: emitted as they are where possible
                plan = plan_for(sources, ctx.caps, spec, weight.const_value.dtype, weight.name)
                emit_prequantized(model, node, plan, spec, _stem(weight.name))
                count += 1
                continue
            bits = spec.bits_for(weight.name or "")
            if bits is None:
                continue
            k, n = weight.shape
            layout = Layout(k, n, bits, spec.block_size, spec.symmetric, weight.const_value.dtype)
            emit_quantized_matmul(model, node, _rtn(weight.const_value, layout), layout,
                                  spec.form, spec.accuracy_level, _stem(weight.name))
            count += 1
        return count


def _constant_weight(node: ir.Node) -> ir.Value | None:
    """Input 1 of a MatMul if it is a 2-D float initializer the user cannot override."""
    if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2:
        return None
    weight = node.inputs[1]
    if (weight is None or not weight.is_initializer() or weight.is_graph_input()
            or weight.const_value is None or weight.const_value.dtype not in _FLOATS):
        return None
    shape = weight.shape
    if shape is None or len(shape) != 2 or not all(isinstance(d, int) for d in shape):
        return None
    return weight


def _rtn(source: ir.TensorProtocol, layout: Layout):
    def produce():
        return quantize_rtn_kn(source.numpy(), layout.bits, layout.block_size, layout.symmetric)

    return produce


def _stem(name: str | None) -> str:
    name = name or "quantized"
    return name[: -len(".weight")] if name.endswith(".weight") else name
