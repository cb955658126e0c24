"""The --quant int4 checks of one family x EP (EP-default options): L1, L2 and L5.

Run by each EP's golden target (ep/golden_suite.py), which shares the float
build of its L5 golden with :func:`check` as the reference.

* L1: the package builds and every model passes the ONNX checker.
* L2: each Linear (a MatMul with a constant weight in the float build of the
  same EP) became one quantized MatMul in the EP's form and nothing else
  changed (attention / MoE / norm structure untouched); MatMulNBits EPs:
  MatMulNBits count == Linear count; trt-rtx: no zero-point input and block
  128; onnx-standard: no com.microsoft op at all, blocked DequantizeLinear.
* L5: the op histogram equals ep/<ep>/golden_int4/<family>.json
  (regenerate: ./bazelw run //tools:golden -- --update --quant int4).
"""

from __future__ import annotations

from collections import Counter

import onnx
import onnx_ir as ir

from mobius.ep.registry import get_ep
from mobius.quantize.sensitive import wide_weights
from testing import ep_suite as s, golden

QUANT = s.GOLDEN_QUANT
QUANTIZED_OPS = ("com.microsoft::MatMulNBits", "DequantizeLinear")


#: ops that read a Linear's constant weight: MatMul [K, N], the LM head's
#: Gemm(transB=1) [N, K], and what HeadFusedMatMul makes of it on CPU
_LINEAR_OPS = ("MatMul", "Gemm", "com.microsoft::FusedMatMul")
_PLUMBING = ("Reshape", "Shape", "Concat", "Constant", "Squeeze", "Expand")
#: a quantized op -> the float op it replaced
_REPLACED = {"com.microsoft::QMoE": "com.microsoft::MoE",
             "com.microsoft::GatherBlockQuantized": "Gather"}
#: what the Shape lowering makes of each dim on EPs without Shape (ShapeElimination);
#: the quantized head needs no Shape at all, so these counts move with it
_LOWERED_SHAPE = ("Slice", "Cast", "Equal", "ReduceSum")


def _linears(model: ir.Model) -> list[ir.Node]:
    """The ops above on a constant weight; a plain MatMul only on a 2-D one. A 3-D
    MatMul constant (DeepSeek's per-head kv_b_proj halves in latent attention: a
    batched MatMul, not a Linear) stays float, while the CPU head's FusedMatMul
    reads the head's matrix as [1, V, H] and is a Linear."""
    return [n for n in s.all_nodes(model.graph) if s.op_key(n) in _LINEAR_OPS
            and s.is_constant(n.inputs[1]) and n.inputs[1].shape is not None
            and (n.op_type != "MatMul" or len(n.inputs[1].shape) == 2)]


def _structure(histogram: Counter, shape_lowered: bool) -> Counter:
    """Everything but the Linears and shape plumbing; a QMoE counts as the MoE it
    replaced, and a GatherBlockQuantized the token Gather (a tied table shares the
    head's quantized copy by default: mobius/quantize/emit_tied.py). The LM head's plumbing differs by form: the float head on CPU is a
    FusedMatMul on [..., H] (no Reshape / Shape / Concat) and a tied float matrix
    is read as [1, V, H] (Gather axis 1 + Squeeze), while the quantized head reads
    [..., H] without the Gemm's Reshapes (``shape_lowered``: their Shape was lowered
    to _LOWERED_SHAPE ops). The op histograms themselves are pinned by the goldens."""
    plumbing = (*_PLUMBING, *(_LOWERED_SHAPE if shape_lowered else ()))
    out = Counter()
    for op, n in histogram.items():
        if op not in (*_LINEAR_OPS, *plumbing, *QUANTIZED_OPS):
            out[_REPLACED.get(op, op)] += n
    return out


def _check_form(ep: str, model: ir.Model, linears: int) -> None:
    caps = get_ep(ep)
    hist = s.op_histogram(model)
    if caps.quant_form == "matmul_nbits":
        nbits = [n for n in s.all_nodes(model.graph) if s.op_key(n) == QUANTIZED_OPS[0]]
        assert len(nbits) == linears
        # the default method (mixed) keeps the weights quantize/sensitive.py picks at int8
        stems = [node.inputs[1].name.removesuffix("_Q") for node in nbits]
        wide = set(wide_weights(stems)) if 8 in caps.quant_bits else set()
        for node, stem in zip(nbits, stems):
            assert s.attribute(node, "block_size") in caps.quant_block_sizes
            assert s.attribute(node, "bits") == (8 if stem in wide else 4), stem
            assert s.attribute(node, "accuracy_level") == caps.default_int4_accuracy_level
            if not caps.quant_zero_points:
                assert len(node.inputs) == 3, "zero points given to an EP that takes none"
    else:
        assert hist["DequantizeLinear"] == linears
        for node in s.all_nodes(model.graph):
            if node.op_type == "DequantizeLinear":
                assert s.attribute(node, "block_size") == caps.default_quant_block_size
                assert node.outputs[0].uses()[0].node.op_type == "MatMul"


def check(float_built: s.Built, built: s.Built) -> None:
    """Asserts L1 / L2 / L5 of the int4 build ``built`` against the float build of its EP."""
    ep, family = built.ep, built.family
    for key, model in built.models.items():
        reference = float_built.models[key]
        linears = len(_linears(reference))
        assert not _linears(model), f"{key}: a Linear was left float"
        _check_form(ep, model, linears)
        lowered = not get_ep(ep).supports_shape
        expected = _structure(s.op_histogram(reference), lowered)
        # a biased head Gemm(x, W, b) is quantized as Add(quantized(x, W), b)
        expected["Add"] += sum(n.op_type == "Gemm" and len(n.inputs) == 3
                               for n in s.all_nodes(reference.graph))
        assert _structure(s.op_histogram(model), lowered) == +expected, key
        onnx.checker.check_model(built.onnx_bytes(key))  # the stored bytes: no re-serializing
    caps = get_ep(ep)
    if not caps.contrib_ops and not caps.keep_function_bodies:  # onnx-standard
        assert not any("::" in op for m in built.models.values() for op in s.op_histogram(m))
    snap = golden.snapshot(built)
    lines = golden.diff(golden.load(golden.golden_path(ep, family, quant=QUANT)), snap)
    assert not lines, golden.failure_message(ep, family, lines, quant=QUANT)
