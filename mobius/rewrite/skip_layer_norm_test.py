"""SkipLayerNormFusion: Add + LayerNormalization -> SkipLayerNormalization."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.rule import RuleContext
from mobius.rewrite.skip_layer_norm import SkipLayerNormFusion
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

FUSED = "com.microsoft::SkipLayerNormalization"
H = 16
RNG = np.random.default_rng(1)


def _ln(name, x, gamma, beta, out, outputs=None, **attrs):
    attrs.setdefault("axis", -1)
    attrs.setdefault("epsilon", 1e-5)
    inputs = [x, gamma] + ([beta] if beta else [])
    return helper.make_node("LayerNormalization", inputs, outputs or [out], name=name, **attrs)


def pre_norm_stack(layers: int = 2, dtype=FLOAT, with_beta: bool = True,
                   sum_is_output: bool = False, **norm_attrs):
    """h0 -> LN -> MatMul -> h1 = h0 + . -> LN -> ... -> final LN: 2L+1 norms, 2L residual Adds."""
    np_dtype = np.float16 if dtype == FLOAT16 else np.float32
    nodes, inits = [], []
    hidden = "h0"

    def params(tag):
        inits.append(weight(f"g{tag}", (1 + 0.1 * RNG.standard_normal(H)).astype(np_dtype)))
        if with_beta:
            inits.append(weight(f"be{tag}", (0.1 * RNG.standard_normal(H)).astype(np_dtype)))
        return f"g{tag}", f"be{tag}" if with_beta else None

    for i in range(2 * layers):
        inits.append(weight(f"w{i}", (0.3 * RNG.standard_normal((H, H))).astype(np_dtype)))
        nodes.append(_ln(f"norm{i}", hidden, *params(i), f"n{i}", **norm_attrs))
        nodes.append(helper.make_node("MatMul", [f"n{i}", f"w{i}"], [f"b{i}"]))
        nodes.append(helper.make_node("Add", [hidden, f"b{i}"], [f"h{i + 1}"], name=f"add{i}"))
        hidden = f"h{i + 1}"
    nodes.append(_ln("final_norm", hidden, *params("f"), "y", **norm_attrs))
    outputs = [info("y", dtype, None)] + ([info(hidden, dtype, None)] if sum_is_output else [])
    return make_model(nodes, [info("h0", dtype, ["batch", "seq", H])], outputs, inits)


def _feeds(dtype=np.float32):
    return {"h0": RNG.standard_normal((2, 5, H)).astype(dtype)}


def _single(a_shape=("B", "S", H), b_shape=("B", "S", H), gamma_len=H, beta_len=H,
            ln_outputs=None, **norm_attrs):
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             _ln("norm", "s", "g", "be" if beta_len else None, "y", ln_outputs, **norm_attrs)]
    inits = [weight("g", np.ones(gamma_len, np.float32))]
    if beta_len:
        inits.append(weight("be", np.zeros(beta_len, np.float32)))
    outputs = [info(o, FLOAT, None) for o in (ln_outputs or ["y"])]
    return make_model(nodes, [info("a", FLOAT, list(a_shape)), info("b", FLOAT, list(b_shape))],
                      outputs, inits)


# --- (a) pattern in -> pattern out ----------------------------------------------------------


@pytest.mark.parametrize("with_beta", [True, False])
def test_fuses_every_residual_norm_across_layer_boundaries(with_beta):
    model = pre_norm_stack(2, with_beta=with_beta)
    assert apply_rule(SkipLayerNormFusion(), model, "cpu") == 4
    assert histogram(model) == {FUSED: 4, "LayerNormalization": 1, "MatMul": 4}
    fused = [n for n in model.graph if n.op_type == "SkipLayerNormalization"]
    for node, following in zip(fused, fused[1:]):
        assert [u.node for u in node.outputs[3].uses()] == [following]
    for node in fused:
        assert len(node.inputs) == (4 if with_beta else 3)
        assert node.outputs[1].name == "" and node.outputs[2].name == ""
        assert node.attributes["epsilon"].value == pytest.approx(1e-5)
    check_model(model)


def test_sum_that_is_a_graph_output_comes_from_output_3():
    model = pre_norm_stack(1, sum_is_output=True)
    feeds = _feeds()
    before = run_ort(model, feeds)
    assert apply_rule(SkipLayerNormFusion(), model, "cpu") == 2
    last = [n for n in model.graph if n.op_type == "SkipLayerNormalization"][-1]
    assert model.graph.outputs[1] is last.outputs[3] and last.outputs[3].name == "h2"
    for got, want in zip(run_ort(without_functions(model), feeds), before):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_epsilon_and_stash_type_are_carried_over():
    model = _single(epsilon=0.02)
    assert apply_rule(SkipLayerNormFusion(), model, "cpu") == 1
    fused = next(iter(model.graph))
    assert fused.attributes["epsilon"].value == pytest.approx(0.02)
    norm = next(n for n in model.functions[fused.op_identifier()]
                if n.op_type == "LayerNormalization")
    assert norm.attributes["epsilon"].value == pytest.approx(0.02)
    assert norm.attributes["stash_type"].value == 1


# --- (b) near misses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        dict(axis=1),  # normalizes [S, H] jointly
        dict(b_shape=(H,)),  # a bias-like 1-D operand, not a skip
        dict(gamma_len=1),  # broadcast scale: the kernel reads H values
        dict(beta_len=1),
        dict(ln_outputs=["y", "mean"]),  # the norm's Mean is used
        dict(a_shape=("B", "S", 2, H), b_shape=("B", "S", 2, H)),  # rank 4
    ],
    ids=["axis1", "bias_like_skip", "scalar_gamma", "scalar_beta", "mean_used", "rank4"],
)
def test_near_misses_are_left_unchanged(case):
    model = _single(**case)
    before = histogram(model)
    assert apply_rule(SkipLayerNormFusion(), model, "cpu") == 0
    assert histogram(model) == before


def test_add_feeding_something_else_is_left_alone():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, [info("a", FLOAT, ["B", "S", H]), info("b", FLOAT, ["B", "S", H])],
                       [info("y", FLOAT, None)])
    assert apply_rule(SkipLayerNormFusion(), model, "cpu") == 0
    assert histogram(model) == {"Add": 1, "Relu": 1}


def test_f16_stash_type_0_is_left_unchanged():
    model = pre_norm_stack(1, dtype=FLOAT16, stash_type=0)
    assert apply_rule(SkipLayerNormFusion(), model, "cuda", ir.DataType.FLOAT16) == 0


# --- (c) the rewritten graph runs with the same outputs -------------------------------------


@pytest.mark.parametrize("with_beta", [True, False])
def test_fused_graph_matches_the_original_in_onnxruntime(with_beta):
    model = pre_norm_stack(3, with_beta=with_beta, sum_is_output=True)
    feeds = _feeds()
    before = run_ort(model, feeds)
    apply_rule(SkipLayerNormFusion(), model, "cpu")
    for got, want in zip(run_ort(without_functions(model), feeds), before):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --- (d) gating -----------------------------------------------------------------------------


@pytest.mark.parametrize("ep", ["default", "trt-rtx", "mlx", "onnx-standard"])
def test_not_applied_where_the_ep_lacks_the_kernel(ep):
    model = pre_norm_stack(1)
    before = histogram(model)
    assert apply_rule(SkipLayerNormFusion(), model, ep) == 0
    assert histogram(model) == before
    optimize_model(model, ep)
    assert FUSED not in histogram(model)


@pytest.mark.parametrize("ep", ["cpu", "cuda", "dml", "webgpu"])
def test_applied_where_the_ep_has_the_kernel(ep):
    report = optimize_model(pre_norm_stack(1), ep)
    assert report.histogram.get(FUSED) == 2


def test_gated_by_capability_data_not_names():
    rule = SkipLayerNormFusion()
    kernels = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}
    assert not rule.applies(RuleContext(EpCapabilities(name="x", contrib_ops=kernels),
                                        ir.DataType.FLOAT, "decoder"))
    assert rule.applies(RuleContext(
        EpCapabilities(name="y", contrib_ops=kernels, supports_skip_layer_norm=True),
        ir.DataType.FLOAT, "vision"))
    for caps in ep_registry:
        expected = caps.supports_skip_layer_norm and caps.has_kernel("SkipLayerNormalization")
        assert rule.applies(RuleContext(caps, ir.DataType.FLOAT, "decoder")) == expected


# --- (e) the function body == the kernel ----------------------------------------------------


@pytest.mark.parametrize("with_beta", [True, False])
def test_inlined_body_matches_the_kernel_and_is_standard_onnx(with_beta):
    model = pre_norm_stack(2, with_beta=with_beta, sum_is_output=True)
    feeds = _feeds()
    original = run_ort(model, feeds)
    apply_rule(SkipLayerNormFusion(), model, "cpu")
    kernel = run_ort(without_functions(model), feeds)
    inlined = copy_model(model)
    assert inline_for(inlined, "onnx-standard") == 4
    assert custom_domain_nodes(inlined) == [] and not inlined.functions
    check_model(inlined)
    for got_body, got_kernel, want in zip(run_ort(inlined, feeds), kernel, original):
        np.testing.assert_allclose(got_body, got_kernel, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_body, want, rtol=1e-6, atol=1e-6)


def test_onnx_standard_pipeline_leaves_no_custom_ops():
    model = pre_norm_stack(2)
    feeds = _feeds()
    apply_rule(SkipLayerNormFusion(), model, "cpu")
    fused = run_ort(model, feeds)
    optimize_model(model, "onnx-standard")
    assert custom_domain_nodes(model) == []
    np.testing.assert_allclose(run_ort(model, feeds)[0], fused[0], rtol=1e-5, atol=1e-5)
