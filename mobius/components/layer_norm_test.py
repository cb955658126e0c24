"""LayerNorm (ONNX LayerNormalization, statistics in float32) vs torch's layer_norm,
with and without a bias, at every onnxruntime graph optimization level (torch's side
recorded at build time, layer_norm_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius.components import layer_norm_cases as cases
from mobius.components.layer_norm import LayerNorm
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.recorded_arrays import load

SIZE = cases.SIZE
LEVELS = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def _recorded(case: str) -> tuple[dict[str, np.ndarray], np.ndarray, float, np.ndarray]:
    """The case's weights, x, eps and torch's y (layer_norm_cases.py)."""
    run = load(cases, case)
    arrays = {k: run[k] for k in ("weight", "bias") if k in run}
    return arrays, run["x"], float(run["eps"]), run["y"]


def _model(tmp_path, dtype, arrays, eps):
    with build_context(None, dtype):
        norm = LayerNorm(SIZE, eps, bias="bias" in arrays)
    attach_arrays(norm, arrays, tmp_path)
    return component_model([("x", dtype, ["batch", "seq", SIZE])],
                           lambda op, x_: norm(op, x_), ["y"])


@pytest.mark.parametrize("level", sorted(LEVELS))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_f32_matches_torch_at_every_optimization_level(tmp_path, bias, level):
    arrays, x, eps, expected = _recorded("bias" if bias else "no_bias")
    assert eps == 1e-5 and ("bias" in arrays) == bias
    model = _model(tmp_path, ir.DataType.FLOAT, arrays, 1e-5)
    (y,) = run_model(model, {"x": x}, optimization_level=LEVELS[level])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_bias_free_form_has_no_empty_input(tmp_path):
    """An empty-named third input crashed onnxruntime 1.32 at the extended level."""
    arrays, _ = cases.random_arrays(bias=False)
    model = _model(tmp_path, ir.DataType.FLOAT, arrays, 1e-5)
    (node,) = [n for n in model.graph if n.op_type == "LayerNormalization"]
    assert len(node.inputs) == 2 and all(v is not None for v in node.inputs)


def test_bias_is_used(tmp_path):
    arrays, x = cases.random_arrays(bias=True)
    (with_bias,) = run_model(_model(tmp_path / "a", ir.DataType.FLOAT, arrays, 1e-5), {"x": x})
    arrays["bias"] = np.zeros(SIZE, np.float32)
    (zero_bias,) = run_model(_model(tmp_path / "b", ir.DataType.FLOAT, arrays, 1e-5), {"x": x})
    assert np.abs(with_bias - zero_bias).max() > 0.1


def test_epsilon_is_used(tmp_path):
    # inputs ~1e-3: eps = 1e-2 dominates the variance, a dropped eps changes y ~30x
    arrays, x, eps, expected = _recorded("epsilon")
    assert eps == 1e-2 and np.abs(x).max() < 0.1
    (y,) = run_model(_model(tmp_path, ir.DataType.FLOAT, arrays, 1e-2), {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_f16_computes_statistics_in_float32(tmp_path):
    """f16 I/O and weights; the mean/variance of values ~1e3 would lose digits in f16."""
    arrays, x, eps, expected = _recorded("f16")  # torch on the f16-rounded weights
    assert eps == 1e-5 and "bias" in arrays and x.min() > 900
    x = x.astype(np.float16)
    model = _model(tmp_path, ir.DataType.FLOAT16, arrays, 1e-5)
    (y,) = run_model(model, {"x": x}, optimization_level=LEVELS["extended"])
    assert y.dtype == np.float16
    # f16 rounding of x (~1000: spacing 0.5) is the input; the output's own rounding
    # is eps(f16)/2 * |y| (|y| < 8 here): 1e-2 leaves headroom for both.
    np.testing.assert_allclose(y.astype(np.float32), expected, atol=1e-2)
