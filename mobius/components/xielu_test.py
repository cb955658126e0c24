"""XIELU vs transformers' XIELUActivation on random inputs (transformers' side recorded at
build time, xielu_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import xielu_cases as cases
from mobius.components.xielu import XIELU
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.recorded_arrays import load


def _mobius(tmp_path, state, x):
    with build_context(None, ir.DataType.FLOAT):
        act = XIELU()
    attach_arrays(act, state, tmp_path)
    model = component_model([("x", ir.DataType.FLOAT, list(x.shape))],
                            lambda op, x_: act(op, x_), ["y"])
    (y,) = run_model(model, {"x": x})
    return y


@pytest.mark.parametrize("case", cases.CASES)
def test_matches_transformers(tmp_path, case):
    state, run = load(cases, case, "state"), load(cases, case)
    assert set(state) == {"alpha_p", "alpha_n", "beta", "eps"}
    got = _mobius(tmp_path, state, run["x"])
    np.testing.assert_allclose(got, run["y"], rtol=1e-6, atol=1e-6)
