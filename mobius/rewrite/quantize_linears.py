"""Fuse (last): every MatMul with a constant float weight -> the EP's quantized form.

    y = MatMul(x, W[K, N])    ->    MatMulNBits(x, B, scales[, zp])        (quant_form matmul_nbits)
                              ->    MatMul(x, DequantizeLinear(codes, ...)) (dequantize_linear)
    y = Gemm(x, W[N, K], transB=1)  (the LM head)  ->  the same forms

A Linear is the only thing that puts a constant 2-D weight on a MatMul, so
this one pass covers every family and every role (decoder, vision, encoder);
attention, MoE and norm structure are untouched. It runs after the fusions
(packed QKV is quantized as one matrix) and before inlining (which expands
MatMulNBits where the EP lacks the kernel). Weights are quantized by RTN when
the saver asks for them (see mobius.quantize.emit). A fused MoE becomes
QMoE where the EP has that kernel (mobius.quantize.emit_moe). A tied matrix
(the token embedding's Gather and the LM head read one initializer) is
quantized once and shared by GatherBlockQuantized and MatMulNBits where the
EP has both kernels (mobius.quantize.emit_tied); elsewhere the lookup and
the head are quantized apart. Legal where the build asked for quantization
(``ctx.quant``).

With calibration text (``QuantSpec.calibration``), the graph as it stands
here, still float, is run once over the text first (mobius.quantize.
activation_stats), and each MatMul's and the head's weight is quantized by
GPTQ from its input's statistics (mobius.quantize.gptq). Expert weights, a
quantized embedding table and a tied matrix shared by the lookup and the
head stay RTN: a table row is read as it is, not through a product with
calibrated inputs.
"""

from __future__ import annotations

import dataclasses
import logging

import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN
from mobius.ep import contrib_ops
from mobius.ep.contrib_ops import QMOE
from mobius.quantize.activation_stats import can_calibrate
from mobius.quantize.emit import MATMUL_NBITS, Layout, emit_quantized_matmul, replace_node
from mobius.quantize.emit_gather import emit_quantized_gather
from mobius.quantize.emit_moe import emit_qmoe
from mobius.quantize.emit_tied import emit_tied_quantized
from mobius.quantize.gptq import quantize_gptq_kn
from mobius.quantize.prequantized import emit_prequantized, plan_for, sources_of
from mobius.quantize.rtn import quantize_rtn_kn, quantize_rtn_rows
from mobius.quantize.sensitive import resolve_mixed
from mobius.quantize.sequential import Target, calibrated_factors
from mobius.rewrite.rule import Rule, RuleContext, attr, initializer_array

logger = logging.getLogger(__name__)
TOKEN_IDS = "input_ids"  # the graph contract's token input (DESIGN.md)
_FLOATS = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)


class QuantizeLinears(Rule):
    name = "QuantizeLinears"
    stage = "fuse"
    order = 100

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.quant is not None

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        matrices = [v.name for v in model.graph.initializers.values() if _is_float_matrix(v)]
        ctx = dataclasses.replace(ctx, quant=resolve_mixed(ctx.quant, matrices, ctx.caps))
        spec = ctx.quant
        factors = _calibrate(model, spec)
        count = 0
        tied = _tied_tables(model)  # before any lookup is replaced
        for node in list(model.graph):
            if node.graph is None:  # removed with a tied embedding
                continue
            if self._tied(model, node, ctx):
                count += 2
                continue
            if self._experts(model, node, ctx) or self._embedding(model, node, ctx, tied):
                count += 1
                continue
            if self._head(model, node, spec, tied, factors):
                count += 1
                continue
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
            produce = _producer(weight.const_value, layout, spec.method,
                                factors.get(node.inputs[0].name))
            emit_quantized_matmul(model, node, produce, layout, spec.form, spec.accuracy_level,
                                  _stem(weight.name))
            count += 1
        return count


    @staticmethod
    def _head(model: ir.Model, node: ir.Node, spec, tied: set, factors: dict) -> bool:
        """The LM head: Gemm(rows, W[N, K], transB=1) reading the [vocab, hidden]
        matrix as stored (mobius/components/lm_head.py). W is already the
        quantized layout's [N, K]; a matrix the embedding's Gather also reads
        (``tied``, even once the lookup has its own quantized copy) is named as
        the head for --quant-lm-head and overrides."""
        if not _is_head(node):
            return False
        weight = node.inputs[1]
        name = "lm_head.weight" if weight in tied else (weight.name or "lm_head.weight")
        bits = spec.bits_for(name)
        if bits is None:
            return False
        n, k = weight.shape
        layout = Layout(k, n, bits, spec.block_size, spec.symmetric, weight.const_value.dtype)
        if len(node.inputs) == 3:  # Gemm(x, W, b) -> Add(Gemm(x, W), b): the bias stays float
            node = _split_bias(model, node)
        produce = _producer(weight.const_value, layout, spec.method,
                            factors.get(node.inputs[0].name), transposed=True)
        emit_quantized_matmul(model, node, produce, layout, spec.form, spec.accuracy_level,
                              _stem(name))
        return True

    @staticmethod
    def _experts(model: ir.Model, node: ir.Node, ctx: RuleContext) -> bool:
        """A fused MoE -> QMoE where the EP has the kernel (else its experts stay float)."""
        if node.op_type != "MoE" or node.domain != MS_DOMAIN or not ctx.caps.has_kernel(QMOE):
            return False
        bits = ctx.quant.bits_for(node.inputs[2].name or "")
        return bits is not None and emit_qmoe(model, node, bits, ctx.quant.block_size,
                                              ctx.quant.symmetric, ctx.quant.method)


    @staticmethod
    def _embedding(model: ir.Model, node: ir.Node, ctx: RuleContext, tied: set) -> bool:
        """Gather(E[V, H] initializer, ids, axis=0) where the build quantizes embeddings;
        a tied table whose head stays float stays float too (one copy, not two)."""
        table = _token_table(node) if ctx.quant.embedding else None
        if table in tied and ctx.quant.bits_for("lm_head.weight") is None:
            return False
        bits = None if table is None else ctx.quant.bits_for(table.name or "")
        return bits is not None and emit_quantized_gather(
            model, node, bits, ctx.quant.block_size, ctx.quant.symmetric, ctx.quant.form,
            ctx.quant.method)

    @staticmethod
    def _tied(model: ir.Model, node: ir.Node, ctx: RuleContext) -> bool:
        """The token table's Gather whose matrix only the LM head also reads -> one
        quantized copy both read, where the EP has GatherBlockQuantized and
        MatMulNBits kernels, the build is symmetric and both get the same bits."""
        spec, caps = ctx.quant, ctx.caps
        if (not spec.tied_embedding or not spec.symmetric or spec.form != MATMUL_NBITS
                or not caps.has_kernel(contrib_ops.GATHER_BLOCK_QUANTIZED)
                or not caps.has_kernel(contrib_ops.MATMUL_NBITS)):
            return False
        table = _token_table(node)
        heads = [] if table is None else [u.node for u in table.uses() if u.node is not node]
        if len(heads) != 1 or not _is_head(heads[0]) or heads[0].inputs[1] is not table:
            return False
        bits = spec.bits_for(table.name or "")
        if (bits is None or bits != spec.bits_for("lm_head.weight")
                or table.shape[1] % spec.block_size):
            return False
        head = _split_bias(model, heads[0]) if len(heads[0].inputs) == 3 else heads[0]
        emit_tied_quantized(model, node, head, bits, spec.block_size, spec.accuracy_level,
                            spec.method)
        return True


def _tied_tables(model: ir.Model) -> set:
    """Token tables (see _token_table) that an LM head reads too."""
    tables = (_token_table(node) for node in model.graph)
    return {t for t in tables if t is not None and any(_is_head(u.node) for u in t.uses())}


def _token_table(node: ir.Node) -> ir.Value | None:
    """E of Gather(E[V, H] float initializer, input_ids, axis=0), else None.

    Only the token table (indexed by the graph input input_ids): the other
    Gathers of constant tables (RoPE caches indexed by position_ids, GPT-2's
    position table) stay float."""
    if node.op_type != "Gather" or node.domain != "":
        return None
    table, ids = node.inputs[0], node.inputs[1]
    if not _token_ids(ids):
        return None
    axis = node.attributes.get("axis")
    return table if (axis is None or axis.value == 0) and _is_float_matrix(table) else None


def _token_ids(ids: ir.Value | None) -> bool:
    """The graph input input_ids, or Where(mask, constant, ...) over it, once per media kind:
    a multimodal embedding model's ids with the image (and audio) placeholders sent to a
    fixed row (mobius/components/image_tokens.py)."""
    while ids is not None and (where := ids.producer()) is not None:
        if not (where.op_type == "Where" and where.domain == ""
                and initializer_array(where.inputs[1]) is not None):
            break
        ids = where.inputs[2]
    return ids is not None and ids.is_graph_input() and ids.name == TOKEN_IDS


def _is_head(node: ir.Node) -> bool:
    """Gemm(x, W[N, K] float initializer[, b], transB=1): the LM head's form."""
    if node.op_type != "Gemm" or node.domain != "" or len(node.inputs) not in (2, 3):
        return False
    if attr(node, "transB", 0) != 1 or attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1:
        return False
    return _is_float_matrix(node.inputs[1]) and (len(node.inputs) == 2
                                                 or attr(node, "beta", 1.0) == 1)


def _split_bias(model: ir.Model, gemm: ir.Node) -> ir.Node:
    """Gemm(x, W, b) -> Add(Gemm(x, W), b); returns the bias-free Gemm."""
    x, weight, bias = gemm.inputs
    plain = ir.Node("", "Gemm", [x, weight], attributes=[ir.AttrInt64("transB", 1)],
                    name=gemm.name)
    add = ir.Node("", "Add", [plain.outputs[0], bias], name=f"{gemm.name}/bias" if gemm.name else None)
    replace_node(model.graph, gemm, [plain, add])
    return plain


def _constant_weight(node: ir.Node) -> ir.Value | None:
    """Input 1 of a MatMul if it is a 2-D float initializer the user cannot override."""
    if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2:
        return None
    weight = node.inputs[1]
    return weight if _is_float_matrix(weight) else None


def _is_float_matrix(value: ir.Value | None) -> bool:
    """A 2-D float initializer with a static shape that the user cannot override."""
    if (value is None or not value.is_initializer() or value.is_graph_input()
            or value.const_value is None or value.const_value.dtype not in _FLOATS):
        return False
    shape = value.shape
    return shape is not None and len(shape) == 2 and all(isinstance(d, int) for d in shape)


def _producer(source: ir.TensorProtocol, layout: Layout, method: str, factor=None,
              transposed: bool = False):
    """RTN (GPTQ where ``factor``, from the input's calibration statistics, is given) when
    the saver asks; ``transposed``: ``source`` is [N, K] (the LM head's Gemm), read
    a band of rows at a time where RTN can."""
    def produce():
        if factor is not None:
            weight = source.numpy()
            return quantize_gptq_kn(weight.T if transposed else weight, factor, layout.bits,
                                    layout.block_size, layout.symmetric, method)
        if transposed:
            return quantize_rtn_rows(source, layout.bits, layout.block_size, layout.symmetric,
                                     method)
        return quantize_rtn_kn(source.numpy(), layout.bits, layout.block_size, layout.symmetric,
                               method)

    return produce


def _calibrate(model: ir.Model, spec) -> dict:
    """Input name -> GPTQ factor (of the Gram matrix) of every MatMul and head that the
    pass will quantize from float, where the build has calibration text and the
    graph takes token ids (``{}`` otherwise: RTN). Made here, once per input:
    projections that share an input share it; statistics from the float graph,
    then from the graph quantized as the last pass would (mobius.quantize.sequential)."""
    if spec.calibration is None:
        return {}
    if not can_calibrate(model.graph):
        logger.warning("--quant-calibration: graph %r does not take token ids alone; its "
                       "weights are quantized without calibration", model.graph.name)
        return {}
    targets = []
    for node in model.graph:
        head = _is_head(node)
        weight = node.inputs[1] if head else _constant_weight(node)
        if (weight is None or sources_of(weight.const_value) is not None
                or spec.bits_for(weight.name or "") is None):
            continue
        targets.append(Target(node.inputs[0], weight, transposed=head))
    if not targets:
        return {}
    tied = _tied_tables(model)

    def quantize(target: Target, factor):
        """What the pass will make of ``target`` (a tied table: RTN, see _tied)."""
        weight = target.weight
        name = "lm_head.weight" if weight in tied else (weight.name or "")
        k, n = weight.shape[::-1] if target.transposed else weight.shape
        layout = Layout(k, n, spec.bits_for(name), spec.block_size, spec.symmetric,
                        weight.const_value.dtype)
        return _producer(weight.const_value, layout, spec.method,
                         None if weight in tied else factor, target.transposed)()

    return calibrated_factors(model, targets, spec.calibration, quantize,
                              spec.calibration.passes)


def _stem(name: str | None) -> str:
    name = name or "quantized"
    return name[: -len(".weight")] if name.endswith(".weight") else name
