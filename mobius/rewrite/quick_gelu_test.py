"""QuickGeluFusion: x * Sigmoid(alpha * x) -> com.microsoft QuickGelu."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.quick_gelu import QuickGeluFusion
from mobius.rewrite.rule import RuleContext
from testing.fusion_checks import (
    FLOAT,
    FLOAT16,
    apply_rule,
    check_model,
    copy_model,
    custom_domain_nodes,
    histogram,
    info,
    inline_for,
    make_model,
    run_ort,
    weight,
    without_functions,
)

RNG = np.random.default_rng(11)
H, I = 8, 12
QUICK_GELU = "com.microsoft::QuickGelu"


def mlp(alpha=1.702, layers=1, swap_outer=False, swap_inner=False, elem=FLOAT, alpha_shape=(),
        scaled_is_output=False, other_operand=False):
    """y = MatMul(x1 * Sigmoid(alpha * x1), w2) with x1 = MatMul(x, w1), ``layers`` times."""
    np_t = np.float32 if elem == FLOAT else np.float16
    nodes, outputs = [], []
    inits = [weight("alpha", np.full(alpha_shape, alpha, np_t))]
    inputs = [info("x", elem, ["B", "S", H])]
    hidden = "x"
    for i in range(layers):
        inits += [weight(f"w1_{i}", (RNG.standard_normal((H, I)) / 2).astype(np_t)),
                  weight(f"w2_{i}", (RNG.standard_normal((I, H)) / 2).astype(np_t))]
        x1 = f"m_{i}"
        nodes.append(helper.make_node("MatMul", [hidden, f"w1_{i}"], [x1]))
        scaled_operands = ["alpha", x1] if swap_inner else [x1, "alpha"]
        nodes.append(helper.make_node("Mul", scaled_operands, [f"ax_{i}"]))
        nodes.append(helper.make_node("Sigmoid", [f"ax_{i}"], [f"s_{i}"]))
        first = "x" if other_operand else x1  # the gate multiplies another tensor
        operands = [f"s_{i}", first] if swap_outer else [first, f"s_{i}"]
        if other_operand:
            nodes.append(helper.make_node("MatMul", ["x", f"w1_{i}"], ["x_other"]))
            operands = [f"s_{i}", "x_other"]
        nodes.append(helper.make_node("Mul", operands, [f"g_{i}"]))
        nodes.append(helper.make_node("MatMul", [f"g_{i}", f"w2_{i}"], [f"y_{i}"]))
        hidden = f"y_{i}"
    if scaled_is_output:
        outputs.append(info("ax_0", elem, None))
    return make_model(nodes, inputs, [info(hidden, elem, None)] + outputs, inits)


def _feeds(np_t=np.float32):
    return {"x": RNG.standard_normal((2, 3, H)).astype(np_t)}


@pytest.mark.parametrize("swap_outer", [False, True])
@pytest.mark.parametrize("swap_inner", [False, True])
@pytest.mark.parametrize("alpha", [1.702, 1.0])
def test_fuses_and_kernel_matches(swap_outer, swap_inner, alpha):
    model = mlp(alpha, layers=2, swap_outer=swap_outer, swap_inner=swap_inner)
    feeds = _feeds()
    before = run_ort(model, feeds)
    assert apply_rule(QuickGeluFusion(), model, "cpu", role="encoder") == 2
    hist = histogram(model)
    assert hist == {"MatMul": 4, QUICK_GELU: 2}
    for node in model.graph:
        if node.op_type == "QuickGelu":
            assert node.attributes["alpha"].value == pytest.approx(alpha)
            assert node.inputs[0].producer().op_type == "MatMul"
    check_model(model)
    after = run_ort(without_functions(model), feeds)
    np.testing.assert_allclose(after[0], before[0], rtol=1e-5, atol=1e-5)


def test_f16_kernel_matches_on_cpu():
    model = mlp(elem=FLOAT16)
    feeds = _feeds(np.float16)
    before = run_ort(model, feeds)
    assert apply_rule(QuickGeluFusion(), model, "cpu", ir.DataType.FLOAT16) == 1
    after = run_ort(without_functions(model), feeds)
    np.testing.assert_allclose(after[0].astype(np.float32), before[0].astype(np.float32),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize(
    "kwargs",
    [dict(alpha_shape=(I,)), dict(scaled_is_output=True), dict(other_operand=True)],
    ids=["alpha_per_channel", "scaled_used_elsewhere", "gate_on_another_tensor"],
)
def test_near_misses_are_left_unchanged(kwargs):
    model = mlp(**kwargs)
    before = histogram(model)
    assert apply_rule(QuickGeluFusion(), model, "cpu") == 0
    assert histogram(model) == before


def test_plain_silu_is_left_alone():
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    model = make_model(nodes, [info("x", FLOAT, ["B", H])], [info("y", FLOAT, None)])
    assert apply_rule(QuickGeluFusion(), model, "cpu") == 0


@pytest.mark.parametrize("ep", ["default", "trt-rtx", "mlx", "onnx-standard"])
def test_not_applied_where_the_ep_lacks_the_kernel(ep):
    model = mlp()
    assert apply_rule(QuickGeluFusion(), model, ep) == 0
    optimize_model(model, ep, model_role="encoder")
    assert QUICK_GELU not in histogram(model)


@pytest.mark.parametrize("ep", ["cpu", "cuda", "dml", "webgpu"])
def test_applied_where_the_ep_has_the_kernel(ep):
    report = optimize_model(mlp(), ep, model_role="encoder")
    assert report.histogram.get(QUICK_GELU) == 1


def test_gated_by_capability_data():
    caps = EpCapabilities(name="quick-gelu-only", contrib_ops={"QuickGelu"})
    rule = QuickGeluFusion()
    assert rule.applies(RuleContext(caps, ir.DataType.FLOAT, "encoder"))
    for caps in ep_registry:
        for dtype in caps.dtypes:
            expected = caps.has_kernel("QuickGelu") and caps.computes(dtype)
            assert rule.applies(RuleContext(caps, dtype, "encoder")) == expected


def test_inlined_body_is_the_original_standard_graph():
    model = mlp(layers=2)
    feeds = _feeds()
    original = run_ort(model, feeds)
    apply_rule(QuickGeluFusion(), model, "cpu")
    inlined = copy_model(model)
    assert inline_for(inlined, "onnx-standard") == 2
    assert custom_domain_nodes(inlined) == [] and not inlined.functions
    check_model(inlined)
    np.testing.assert_allclose(run_ort(inlined, feeds)[0], original[0], rtol=1e-6, atol=1e-6)
