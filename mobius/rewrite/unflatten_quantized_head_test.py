"""UnflattenQuantizedHead: a quantized head reads [B, S, H] directly, no Reshape copies."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from mobius.ep.registry import get_ep
from mobius.quantize.spec import resolve_quant
from mobius.rewrite import library_passes as lib
from mobius.rewrite.quantize_linears import QuantizeLinears
from mobius.rewrite.rule import RuleContext
from mobius.rewrite.unflatten_quantized_head import UnflattenQuantizedHead
from testing.fusion_checks import (FLOAT, check_model, copy_model, histogram, info, make_model,
                                   run_ort, weight)

V, H = 41, 32
RNG = np.random.default_rng(11)
HIDDEN = RNG.standard_normal((2, 3, H)).astype(np.float32)


def head_model(bias: bool = False, restore_from_x: bool = True) -> ir.Model:
    """logits = x @ W^T (+ b), as LMHead emits it: Reshape, Gemm(transB=1), Reshape."""
    inits = [weight("W", RNG.standard_normal((V, H)).astype(np.float32)),
             weight("flat", np.array([-1, H], np.int64)), weight("vocab", np.array([V], np.int64)),
             weight("fixed", np.array([2, 3, V], np.int64))]
    gemm_inputs = ["rows", "W"]
    if bias:
        inits.append(weight("b", RNG.standard_normal(V).astype(np.float32)))
        gemm_inputs.append("b")
    nodes = [
        helper.make_node("Reshape", ["x", "flat"], ["rows"]),
        helper.make_node("Gemm", gemm_inputs, ["y"], transB=1),
        helper.make_node("Shape", ["x"], ["lead"], end=-1),
        helper.make_node("Concat", ["lead", "vocab"], ["shape"], axis=0),
        helper.make_node("Reshape", ["y", "shape" if restore_from_x else "fixed"], ["logits"]),
    ]
    return make_model(nodes, [info("x", FLOAT, ["B", "S", H])],
                      [info("logits", FLOAT, ["B", "S", V])], inits)


def quantized(model: ir.Model, ep: str) -> RuleContext:
    """Runs QuantizeLinears (int4, the EP's defaults, head included) as the pipeline does."""
    caps = get_ep(ep)
    ctx = RuleContext(caps, ir.DataType.FLOAT, "decoder",
                      resolve_quant(caps, "int4", block_size=32, lm_head=True))
    assert QuantizeLinears().apply(model, ctx) == 1
    return ctx


@pytest.mark.parametrize("ep, product", [("cpu", "com.microsoft::MatMulNBits"),
                                         ("onnx-standard", "MatMul")])
@pytest.mark.parametrize("bias", [False, True])
def test_the_head_reads_3d_hidden_states_with_the_same_logits(ep, product, bias):
    model = head_model(bias)
    ctx = quantized(model, ep)
    before = run_ort(copy_model(model), {"x": HIDDEN})[0]
    assert UnflattenQuantizedHead().apply(model, ctx) == 1
    lib.RemoveUnused().apply(model, ctx)
    check_model(model)
    ops = histogram(model)
    assert "Reshape" not in ops and "Shape" not in ops and ops[product] == 1
    assert ops.get("Add", 0) == int(bias)
    (after,) = run_ort(model, {"x": HIDDEN})
    assert after.shape == (2, 3, V)
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6)


def test_a_restore_that_is_not_x_leading_dims_is_left_alone():
    model = head_model(restore_from_x=False)
    assert UnflattenQuantizedHead().apply(model, quantized(model, "cpu")) == 0


def test_a_float_head_is_left_alone():
    ctx = RuleContext(get_ep("cpu"), ir.DataType.FLOAT, "decoder")
    assert not UnflattenQuantizedHead().applies(ctx)
    model = head_model()
    assert UnflattenQuantizedHead().apply(model, ctx) == 0  # a Gemm needs its 2-D rows


def test_a_head_whose_rows_are_read_elsewhere_is_left_alone():
    model = head_model()
    ctx = quantized(model, "cpu")
    rows = next(n for n in model.graph if n.op_type == "Reshape").outputs[0]
    extra = ir.Node("", "ReduceSum", [rows], attributes=[ir.AttrInt64("keepdims", 0)])
    model.graph.append(extra)
    model.graph.outputs.append(extra.outputs[0])
    extra.outputs[0].name, extra.outputs[0].type = "total", ir.TensorType(ir.DataType.FLOAT)
    assert UnflattenQuantizedHead().apply(model, ctx) == 0
