"""LayerNorm (ONNX LayerNormalization, statistics in float32) vs torch's layer_norm,
with and without a bias, at every onnxruntime graph optimization level."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import torch
import onnxruntime as ort

from mobius.components.layer_norm import LayerNorm
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model

SIZE = 24
LEVELS = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def _arrays(bias: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    arrays = {"weight": (1 + 0.2 * rng.standard_normal(SIZE)).astype(np.float32)}
    if bias:
        arrays["bias"] = (0.5 * rng.standard_normal(SIZE)).astype(np.float32)
    x = (3 * rng.standard_normal((2, 5, SIZE)) + 1).astype(np.float32)
    return arrays, x


def _model(tmp_path, dtype, arrays, eps):
    with build_context(None, dtype):
        norm = LayerNorm(SIZE, eps, bias="bias" in arrays)
    attach_arrays(norm, arrays, tmp_path)
    return component_model([("x", dtype, ["batch", "seq", SIZE])],
                           lambda op, x_: norm(op, x_), ["y"])


def _torch(arrays, x, eps):
    bias = arrays.get("bias")
    return torch.nn.functional.layer_norm(
        torch.from_numpy(x), (SIZE,), torch.from_numpy(arrays["weight"]),
        None if bias is None else torch.from_numpy(bias), eps).numpy()


@pytest.mark.parametrize("level", sorted(LEVELS))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_f32_matches_torch_at_every_optimization_level(tmp_path, bias, level):
    arrays, x = _arrays(bias)
    model = _model(tmp_path, ir.DataType.FLOAT, arrays, 1e-5)
    (y,) = run_model(model, {"x": x}, optimization_level=LEVELS[level])
    np.testing.assert_allclose(y, _torch(arrays, x, 1e-5), rtol=1e-5, atol=1e-5)


def test_bias_free_form_has_no_empty_input(tmp_path):
    """An empty-named third input crashed onnxruntime 1.32 at the extended level."""
    arrays, _ = _arrays(bias=False)
    model = _model(tmp_path, ir.DataType.FLOAT, arrays, 1e-5)
    (node,) = [n for n in model.graph if n.op_type == "LayerNormalization"]
    assert len(node.inputs) == 2 and all(v is not None for v in node.inputs)


def test_bias_is_used(tmp_path):
    arrays, x = _arrays(bias=True)
    (with_bias,) = run_model(_model(tmp_path / "a", ir.DataType.FLOAT, arrays, 1e-5), {"x": x})
    arrays["bias"] = np.zeros(SIZE, np.float32)
    (zero_bias,) = run_model(_model(tmp_path / "b", ir.DataType.FLOAT, arrays, 1e-5), {"x": x})
    assert np.abs(with_bias - zero_bias).max() > 0.1


def test_epsilon_is_used(tmp_path):
    # inputs ~1e-3: eps = 1e-2 dominates the variance, a dropped eps changes y ~30x
    arrays, x = _arrays(bias=False)
    x = (x * 1e-3).astype(np.float32)
    (y,) = run_model(_model(tmp_path, ir.DataType.FLOAT, arrays, 1e-2), {"x": x})
    np.testing.assert_allclose(y, _torch(arrays, x, 1e-2), rtol=1e-5, atol=1e-6)


def test_f16_computes_statistics_in_float32(tmp_path):
    """f16 I/O and weights; the mean/variance of values ~1e3 would lose digits in f16."""
    arrays, x = _arrays(bias=True)
    x = (x + 1000).astype(np.float16)
    model = _model(tmp_path, ir.DataType.FLOAT16, arrays, 1e-5)
    (y,) = run_model(model, {"x": x}, optimization_level=LEVELS["extended"])
    assert y.dtype == np.float16
    expected = _torch({k: v.astype(np.float16).astype(np.float32) for k, v in arrays.items()},
                      x.astype(np.float32), 1e-5)
    # f16 rounding of x (~1000: spacing 0.5) is the input; the output's own rounding
    # is eps(f16)/2 * |y| (|y| < 8 here): 1e-2 leaves headroom for both.
    np.testing.assert_allclose(y.astype(np.float32), expected, atol=1e-2)
