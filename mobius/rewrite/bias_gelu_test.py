"""BiasGeluFusion: Add(x, bias) + Gelu -> BiasGelu / FastGelu."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.bias_gelu import BiasGeluFusion
from mobius.rewrite.rule import RuleContext
from testing.fusion_checks import (
    FLOAT,
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

RNG = np.random.default_rng(3)
H, I = 8, 12
KERNEL = {"none": "com.microsoft::BiasGelu", "tanh": "com.microsoft::FastGelu"}


def mlp(approximate="none", bias_first=False, bias_shape=(I,), bias_as_input=False,
        constant_node=False, sum_is_output=False, layers=1):
    """y = MatMul(Gelu(MatMul(x, w1) + b1), w2), ``layers`` times."""
    nodes, inits, inputs = [], [], [info("x", FLOAT, ["B", "S", H])]
    hidden = "x"
    for i in range(layers):
        inits += [weight(f"w1_{i}", 0.5 * RNG.standard_normal((H, I)).astype(np.float32)),
                  weight(f"w2_{i}", 0.5 * RNG.standard_normal((I, H)).astype(np.float32))]
        bias_value = RNG.standard_normal(bias_shape).astype(np.float32)
        if bias_as_input:
            inputs.append(info(f"b_{i}", FLOAT, list(bias_shape)))
        elif constant_node:
            nodes.append(helper.make_node("Constant", [], [f"b_{i}"],
                                          value=weight(f"bias{i}", bias_value)))
        else:
            inits.append(weight(f"b_{i}", bias_value))
        nodes.append(helper.make_node("MatMul", [hidden, f"w1_{i}"], [f"m_{i}"]))
        operands = [f"b_{i}", f"m_{i}"] if bias_first else [f"m_{i}", f"b_{i}"]
        nodes.append(helper.make_node("Add", operands, [f"s_{i}"]))
        nodes.append(helper.make_node("Gelu", [f"s_{i}"], [f"g_{i}"], approximate=approximate))
        nodes.append(helper.make_node("MatMul", [f"g_{i}", f"w2_{i}"], [f"y_{i}"]))
        hidden = f"y_{i}"
    outputs = [info(hidden, FLOAT, None)] + ([info("s_0", FLOAT, None)] if sum_is_output else [])
    return make_model(nodes, inputs, outputs, inits)


def _feeds(model):
    feeds = {"x": RNG.standard_normal((2, 3, H)).astype(np.float32)}
    for value in model.graph.inputs[1:]:
        feeds[value.name] = RNG.standard_normal(I).astype(np.float32)
    return feeds


# --- (a) pattern in -> pattern out, (c) same outputs with the kernel -----------------------------


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("variant", ["bias_last", "bias_first", "constant_node"])
def test_fuses_add_gelu(approximate, variant):
    model = mlp(approximate, bias_first=variant == "bias_first",
                constant_node=variant == "constant_node", layers=2)
    feeds = _feeds(model)
    before = run_ort(model, feeds)
    assert apply_rule(BiasGeluFusion(), model, "cpu") == 2
    hist = histogram(model)
    assert hist[KERNEL[approximate]] == 2 and "Gelu" not in hist and "Add" not in hist
    fused = [n for n in model.graph if n.domain == "com.microsoft"]
    for node in fused:
        assert node.inputs[0].producer().op_type == "MatMul"
        assert node.inputs[1].name.startswith("b_")
    check_model(model)
    after = run_ort(without_functions(model), feeds)  # the com.microsoft kernels
    # FastGelu's kernel evaluates tanh with its own (MLAS) approximation: ~1e-6 off Gelu(tanh).
    np.testing.assert_allclose(after[0], before[0], rtol=1e-5, atol=1e-5)


def test_pipeline_order_gelu_formula_then_bias_gelu():
    """The erf formula after a biased MatMul becomes Gelu (GeluFusion), then BiasGelu."""
    s2 = math.sqrt(2.0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["s"]),
        helper.make_node("Div", ["s", "sqrt2"], ["z"]),
        helper.make_node("Erf", ["z"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["s", "half"], ["h"]),
        helper.make_node("Mul", ["h", "p"], ["y"]),
    ]
    inits = [weight("w", RNG.standard_normal((H, I)).astype(np.float32)),
             weight("b", RNG.standard_normal(I).astype(np.float32)),
             weight("sqrt2", np.array(s2, np.float32)), weight("one", np.array(1.0, np.float32)),
             weight("half", np.array(0.5, np.float32))]
    model = make_model(nodes, [info("x", FLOAT, ["B", "S", H])], [info("y", FLOAT, None)], inits)
    feeds = _feeds(model)
    before = run_ort(model, feeds)
    report = optimize_model(model, "cpu")
    assert report.histogram == {"MatMul": 1, "com.microsoft::BiasGelu": 1}
    assert report.matched("GeluFusion") == 1 and report.matched("BiasGeluFusion") == 1
    np.testing.assert_allclose(run_ort(without_functions(model), feeds)[0], before[0],
                               rtol=1e-5, atol=1e-5)


# --- (b) near misses ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(bias_as_input=True),  # not a constant
        dict(bias_shape=(1, I)),  # 2-D bias
        dict(bias_shape=(1,)),  # broadcast scalar-like bias: the kernel reads I values
        dict(sum_is_output=True),  # the sum is needed elsewhere
    ],
    ids=["non_constant_bias", "bias_2d", "bias_len_1", "sum_used"],
)
def test_near_misses_are_left_unchanged(kwargs):
    model = mlp(**kwargs)
    before = histogram(model)
    assert apply_rule(BiasGeluFusion(), model, "cpu") == 0
    assert histogram(model) == before


def test_add_of_two_activations_is_left_alone():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Gelu", ["s"], ["y"])]
    model = make_model(nodes, [info("a", FLOAT, ["B", I]), info("b", FLOAT, ["B", I])],
                       [info("y", FLOAT, None)])
    assert apply_rule(BiasGeluFusion(), model, "cpu") == 0


# --- (d) gating ----------------------------------------------------------------------------------


@pytest.mark.parametrize("ep", ["default", "trt-rtx", "mlx", "onnx-standard"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_not_applied_where_the_ep_lacks_the_kernel(ep, approximate):
    model = mlp(approximate)
    assert apply_rule(BiasGeluFusion(), model, ep) == 0
    report = optimize_model(model, ep)
    assert KERNEL[approximate] not in report.histogram
    assert custom_domain_nodes(model) == []


@pytest.mark.parametrize("ep", ["cpu", "cuda", "dml", "webgpu"])
def test_applied_where_the_ep_has_the_kernel(ep):
    report = optimize_model(mlp("tanh"), ep)
    assert report.histogram.get("com.microsoft::FastGelu") == 1


def test_each_kernel_gated_separately_by_capability_data():
    only_fast = EpCapabilities(name="only-fast-gelu", contrib_ops={"FastGelu"})
    ctx = RuleContext(only_fast, ir.DataType.FLOAT, "encoder")
    rule = BiasGeluFusion()
    assert rule.applies(ctx)
    erf, tanh = mlp("none"), mlp("tanh")
    assert rule.apply(erf, ctx) == 0
    assert rule.apply(tanh, ctx) == 1
    for caps in ep_registry:
        expected = caps.has_kernel("BiasGelu") or caps.has_kernel("FastGelu")
        assert rule.applies(RuleContext(caps, ir.DataType.FLOAT, "decoder")) == expected


# --- (e) the function bodies == the kernels --------------------------------------------------------


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_inlined_body_matches_the_kernel_and_is_standard_onnx(approximate):
    model = mlp(approximate, layers=2)
    feeds = _feeds(model)
    original = run_ort(model, feeds)
    apply_rule(BiasGeluFusion(), model, "cpu")
    kernel = run_ort(without_functions(model), feeds)
    inlined = copy_model(model)
    assert inline_for(inlined, "onnx-standard") == 2
    assert custom_domain_nodes(inlined) == [] and not inlined.functions
    assert histogram(inlined) == histogram(mlp(approximate, layers=2))
    check_model(inlined)
    body = run_ort(inlined, feeds)
    np.testing.assert_allclose(body[0], kernel[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(body[0], original[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_onnx_standard_pipeline_leaves_no_custom_ops(approximate):
    model = mlp(approximate)
    feeds = _feeds(model)
    apply_rule(BiasGeluFusion(), model, "cpu")
    fused = run_ort(model, feeds)
    optimize_model(model, "onnx-standard")
    assert custom_domain_nodes(model) == []
    np.testing.assert_allclose(run_ort(model, feeds)[0], fused[0], rtol=1e-5, atol=1e-5)
