"""GeluFusion: the erf / tanh Gelu formulas -> the standard Gelu op."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from mobius.ep.registry import ep_registry
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.gelu import GeluFusion
from mobius.rewrite.rule import RuleContext
from testing.fusion_checks import (
    FLOAT,
    FLOAT16,
    apply_rule,
    check_model,
    histogram,
    info,
    make_model,
    run_ort,
    weight,
)

RNG = np.random.default_rng(2)
SQRT2 = math.sqrt(2.0)
SQRT_2_PI = math.sqrt(2.0 / math.pi)


class _Graph:
    """Accumulates nodes and scalar constants for one pattern (x -> y)."""

    def __init__(self, dtype=FLOAT):
        self.dtype = dtype
        self.np_dtype = np.float16 if dtype == FLOAT16 else np.float32
        self.nodes, self.inits = [], []
        self.count = 0

    def const(self, value):
        name = f"c{len(self.inits)}"
        self.inits.append(weight(name, np.array(value, self.np_dtype)))
        return name

    def op(self, op_type, *inputs, out=None):
        self.count += 1
        out = out or f"t{self.count}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out]))
        return out

    def model(self, outputs=("y",), x_shape=("B", "S", 8)):
        return make_model(self.nodes, [info("x", self.dtype, list(x_shape))],
                          [info(o, self.dtype, None) for o in outputs], self.inits)


def _erf_term(g, spelling):
    if spelling == "div":
        z = g.op("Div", "x", g.const(SQRT2))
    elif spelling == "div_rounded":
        z = g.op("Div", "x", g.const(1.414))
    elif spelling == "mul":
        z = g.op("Mul", "x", g.const(1 / SQRT2))
    else:  # "mul_swapped"
        z = g.op("Mul", g.const(0.7071), "x")
    return g.op("Erf", z)


def _tanh_term(g, cube):
    if cube == "factored":  # x * (1 + 0.044715 * x * x)
        sq = g.op("Mul", "x", "x")
        inner = g.op("Mul", "x", g.op("Add", g.const(1.0), g.op("Mul", g.const(0.044715), sq)))
    else:
        if cube == "pow":
            c = g.op("Pow", "x", g.const(3.0))
        elif cube == "mul_left":
            c = g.op("Mul", g.op("Mul", "x", "x"), "x")
        else:  # "mul_right"
            c = g.op("Mul", "x", g.op("Mul", "x", "x"))
        inner = g.op("Add", "x", g.op("Mul", c, g.const(0.044715)))
    return g.op("Tanh", g.op("Mul", g.const(SQRT_2_PI), inner))


def _product(g, t, association, one_first=False):
    s = g.op("Add", g.const(1.0), t) if one_first else g.op("Add", t, g.const(1.0))
    if association == "x_half_times_s":  # torch.onnx: (x * 0.5) * (1 + t)
        return g.op("Mul", g.op("Mul", "x", g.const(0.5)), s, out="y")
    if association == "half_x_times_s":  # HF: 0.5 * x * (1 + t)
        return g.op("Mul", g.op("Mul", g.const(0.5), "x"), s, out="y")
    if association == "s_x_then_half":
        return g.op("Mul", g.op("Mul", s, "x"), g.const(0.5), out="y")
    if association == "x_s_then_div2":
        return g.op("Div", g.op("Mul", "x", s), g.const(2.0), out="y")
    if association == "s_half_then_x":
        return g.op("Mul", g.op("Mul", s, g.const(0.5)), "x", out="y")
    if association == "x_times_half_s":
        return g.op("Mul", "x", g.op("Mul", g.const(0.5), s), out="y")
    assert association == "s_times_x_div2"
    return g.op("Mul", s, g.op("Div", "x", g.const(2.0)), out="y")


ASSOCIATIONS = ["x_half_times_s", "half_x_times_s", "s_x_then_half", "x_s_then_div2",
                "s_half_then_x", "x_times_half_s", "s_times_x_div2"]


def _check_fused(model, approximate, dtype=np.float32, atol=1e-5):
    x = RNG.standard_normal((2, 3, 8)).astype(dtype) * 3
    before = run_ort(model, {"x": x})
    assert apply_rule(GeluFusion(), model, "onnx-standard") == 1
    assert histogram(model) == {"Gelu": 1}
    gelu = next(iter(model.graph))
    assert gelu.attributes["approximate"].value == approximate
    assert gelu.inputs[0].name == "x" and gelu.outputs[0].name == "y"
    check_model(model)
    after = run_ort(model, {"x": x})
    np.testing.assert_allclose(after[0].astype(np.float32), before[0].astype(np.float32),
                               rtol=atol, atol=atol)


# --- (a) pattern in -> pattern out, and (c) the same outputs in onnxruntime --------------------


@pytest.mark.parametrize("association", ASSOCIATIONS)
@pytest.mark.parametrize("spelling", ["div", "div_rounded", "mul", "mul_swapped"])
def test_erf_forms(spelling, association):
    g = _Graph()
    _product(g, _erf_term(g, spelling), association, one_first=spelling == "mul")
    model = g.model()
    # rounded constants (1.414, 0.7071) differ from the exact Gelu by <2e-4 relative
    atol = 1e-3 if spelling in ("div_rounded", "mul_swapped") else 1e-5
    _check_fused(model, "none", atol=atol)


@pytest.mark.parametrize("association", ["x_half_times_s", "s_x_then_half", "x_times_half_s"])
@pytest.mark.parametrize("cube", ["pow", "mul_left", "mul_right", "factored"])
def test_tanh_forms(cube, association):
    g = _Graph()
    _product(g, _tanh_term(g, cube), association)
    _check_fused(g.model(), "tanh")


def test_f16_constants():
    g = _Graph(FLOAT16)
    _product(g, _erf_term(g, "div"), "x_half_times_s")
    # f16 inputs and constants: one f16 ulp at |y| <= 8 is 8e-3
    _check_fused(g.model(), "none", dtype=np.float16, atol=1e-2)


def test_output_that_is_a_graph_output_keeps_its_name():
    g = _Graph()
    _product(g, _erf_term(g, "div"), "x_half_times_s")
    model = g.model()
    apply_rule(GeluFusion(), model, "cpu")
    assert [o.name for o in model.graph.outputs] == ["y"]
    assert model.graph.outputs[0].producer().op_type == "Gelu"


def test_x_with_other_consumers_is_fine():
    g = _Graph()
    _product(g, _erf_term(g, "div"), "x_half_times_s")
    g.op("Relu", "x", out="r")
    model = g.model(outputs=("y", "r"))
    assert apply_rule(GeluFusion(), model, "cpu") == 1
    assert histogram(model) == {"Gelu": 1, "Relu": 1}


# --- (b) near misses ------------------------------------------------------------------------


def _near_miss(build):
    g = _Graph()
    outputs = build(g) or ("y",)
    model = g.model(outputs=outputs)
    before = histogram(model)
    assert apply_rule(GeluFusion(), model, "cpu") == 0
    assert histogram(model) == before


def test_wrong_half_is_left_alone():
    def build(g):
        s = g.op("Add", _erf_term(g, "div"), g.const(1.0))
        g.op("Mul", g.op("Mul", "x", g.const(0.6)), s, out="y")
    _near_miss(build)


def test_wrong_erf_scale_is_left_alone():
    def build(g):
        s = g.op("Add", g.op("Erf", g.op("Div", "x", g.const(2.0))), g.const(1.0))
        g.op("Mul", g.op("Mul", "x", g.const(0.5)), s, out="y")
    _near_miss(build)


def test_erf_of_another_tensor_is_left_alone():
    def build(g):
        other = g.op("Relu", "x")
        s = g.op("Add", g.op("Erf", g.op("Div", other, g.const(SQRT2))), g.const(1.0))
        g.op("Mul", g.op("Mul", "x", g.const(0.5)), s, out="y")
    _near_miss(build)


def test_intermediate_with_another_use_is_left_alone():
    def build(g):
        e = _erf_term(g, "div")
        s = g.op("Add", e, g.const(1.0))
        g.op("Mul", g.op("Mul", "x", g.const(0.5)), s, out="y")
        g.op("Neg", e, out="e_out")
        return ("y", "e_out")
    _near_miss(build)


def test_wrong_cubic_coefficient_is_left_alone():
    def build(g):
        c = g.op("Pow", "x", g.const(3.0))
        inner = g.op("Add", "x", g.op("Mul", c, g.const(0.05)))
        t = g.op("Tanh", g.op("Mul", g.const(SQRT_2_PI), inner))
        _product(g, t, "x_half_times_s")
    _near_miss(build)


def test_below_opset_20_nothing_happens():
    g = _Graph()
    _product(g, _erf_term(g, "div"), "x_half_times_s")
    model = make_model(g.nodes, [info("x", FLOAT, ["B", 8])], [info("y", FLOAT, None)], g.inits,
                       opset=18)
    assert apply_rule(GeluFusion(), model, "cpu") == 0


# --- (d) gating: a standard op, legal everywhere -------------------------------------------------


def test_applies_on_every_ep_dtype_and_role():
    rule = GeluFusion()
    for caps in ep_registry:
        for dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16):
            for role in ("decoder", "encoder", "vision", "embedding"):
                assert rule.applies(RuleContext(caps, dtype, role))


@pytest.mark.parametrize("ep", ["default", "onnx-standard", "trt-rtx", "cpu"])
def test_pipeline_fuses_on_every_ep(ep):
    g = _Graph()
    _product(g, _tanh_term(g, "pow"), "x_half_times_s")
    report = optimize_model(g.model(), ep)
    assert report.histogram == {"Gelu": 1}
