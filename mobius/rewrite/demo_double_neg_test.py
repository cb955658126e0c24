"""DoubleNegElimination (the demo of docs/adding_a_rule.md): Neg(Neg(x)) -> x."""

from __future__ import annotations

import numpy as np
from onnx import helper

from mobius.rewrite.demo_double_neg import DoubleNegElimination
from testing.fusion_checks import (FLOAT, apply_rule, copy_model, histogram, info, make_model,
                                   run_ort)


def _model(output_is_double_neg: bool = False):
    nodes = [helper.make_node("Neg", ["x"], ["n1"]), helper.make_node("Neg", ["n1"], ["n2"])]
    if not output_is_double_neg:
        nodes.append(helper.make_node("Mul", ["n2", "x"], ["y"]))
    out = "n2" if output_is_double_neg else "y"
    return make_model(nodes, [info("x", FLOAT, [2, 3])], [info(out, FLOAT, [2, 3])])


def test_double_negation_goes_and_the_outputs_stay():
    model = _model()
    before = copy_model(model)
    assert apply_rule(DoubleNegElimination(), model) == 1
    assert histogram(model) == {"Mul": 1}
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_ort(model, {"x": x})[0], run_ort(before, {"x": x})[0])


def test_a_graph_output_is_left_alone():
    model = _model(output_is_double_neg=True)
    rule = DoubleNegElimination()
    assert apply_rule(rule, model) == 0
    assert rule.rejections == (("Neg", "the double negation is a graph output"),)
