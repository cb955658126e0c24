"""HeadFusedMatMul: the head's Gemm -> FusedMatMul on a [1, V, H] initializer."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

from mobius.ep.registry import get_ep
from mobius.rewrite.head_fused_matmul import HeadFusedMatMul
from mobius.rewrite.rule import RuleContext
from testing.fusion_checks import (FLOAT, apply_rule, check_model, copy_model, histogram, info,
                                   make_model, run_ort, weight)

V, H = 41, 12
RNG = np.random.default_rng(5)
TABLE = RNG.standard_normal((V, H)).astype(np.float32)


def tied_model(extra_use: bool = False, bias: bool = False, tied: bool = True) -> ir.Model:
    """logits = Gather(W, ids) @ W^T, as LMHead emits it (Reshape, Gemm, Reshape)."""
    inits = [weight("W", TABLE), weight("E", TABLE + 1), weight("flat", np.array([-1, H], np.int64)),
             weight("vocab", np.array([V], np.int64))]
    gemm_inputs = ["rows", "W"]
    if bias:
        inits.append(weight("b", RNG.standard_normal(V).astype(np.float32)))
        gemm_inputs.append("b")
    nodes = [
        helper.make_node("Gather", ["W" if tied else "E", "ids"], ["x"], axis=0),
        helper.make_node("Reshape", ["x", "flat"], ["rows"]),
        helper.make_node("Gemm", gemm_inputs, ["y"], transB=1),
        helper.make_node("Shape", ["x"], ["lead"], end=-1),
        helper.make_node("Concat", ["lead", "vocab"], ["shape"], axis=0),
        helper.make_node("Reshape", ["y", "shape"], ["logits"]),
    ]
    outputs = [info("logits", FLOAT, ["B", "S", V])]
    if extra_use:  # the matrix is also a graph-level operand of something else
        nodes.append(helper.make_node("ReduceSum", ["W"], ["total"], keepdims=0))
        outputs.append(info("total", FLOAT, []))
    return make_model(nodes, [info("ids", TensorProto.INT64, ["B", "S"])], outputs, inits)


IDS = np.array([[0, 5, 40], [7, 7, 2]], np.int64)


def test_rewrites_to_fused_matmul_on_a_3d_matrix_with_the_same_logits():
    model = tied_model()
    before = run_ort(copy_model(model), {"ids": IDS})[0]
    assert apply_rule(HeadFusedMatMul(), model, "cpu") == 1
    check_model(model)
    ops = histogram(model)
    assert ops.get("com.microsoft::FusedMatMul") == 1 and "Gemm" not in ops
    matrices = [v for v in model.graph.initializers.values() if v.const_value.size == V * H]
    assert [(v.name, list(v.shape)) for v in matrices] == [("W", [1, V, H])]  # still one copy
    np.testing.assert_array_equal(matrices[0].const_value.numpy()[0], TABLE)  # same bytes
    (after,) = run_ort(model, {"ids": IDS})
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(after, TABLE[IDS] @ TABLE.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ep, dtype", [("cuda", ir.DataType.FLOAT16), ("default", ir.DataType.FLOAT),
                                       ("webgpu", ir.DataType.FLOAT),
                                       ("cpu", ir.DataType.FLOAT16)])
def test_only_where_a_fused_matmul_kernel_computes_f32(ep, dtype):
    assert apply_rule(HeadFusedMatMul(), tied_model(), ep, dtype) == 0


@pytest.mark.parametrize("prepacks, shape", [(True, [1, V, H]), (False, [V, H])])
def test_an_untied_head_is_3d_only_where_the_ep_prepacks_2d_weights(prepacks, shape):
    model = tied_model(tied=False)
    before = run_ort(copy_model(model), {"ids": IDS})[0]
    caps = dataclasses.replace(get_ep("cpu"), prepacks_2d_weights=prepacks)
    assert HeadFusedMatMul().apply(model, RuleContext(caps, ir.DataType.FLOAT, "decoder")) == 1
    check_model(model)
    assert histogram(model).get("com.microsoft::FusedMatMul") == 1 and "Gemm" not in histogram(model)
    assert list(model.graph.initializers["W"].shape) == shape  # not packed at load: read in place
    assert list(model.graph.initializers["E"].shape) == [V, H]  # the embedding is left alone
    np.testing.assert_allclose(run_ort(model, {"ids": IDS})[0], before, rtol=1e-6, atol=1e-6)


def test_cpu_bf16_builds_compute_in_f32_and_are_rewritten():
    assert apply_rule(HeadFusedMatMul(), tied_model(), "cpu", ir.DataType.BFLOAT16) == 1


@pytest.mark.parametrize("kwargs", [dict(extra_use=True), dict(bias=True)])
def test_leaves_biased_and_otherwise_read_heads_alone(kwargs):
    assert apply_rule(HeadFusedMatMul(), tied_model(**kwargs), "cpu") == 0
