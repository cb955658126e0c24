"""Linear: y = x @ W^T + b from a PyTorch-layout [out, in] checkpoint weight."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.linear import Linear
from mobius.context import build_context
from mobius.errors import WeightsError
from testing.onnx_graphs import attach_arrays, component_model, run_model, run_reference

IN, OUT = 24, 10  # distinct, so a missing transpose cannot line up

# (dtype, numpy dtype, tolerance). The f32 reference is computed from inputs and
# weights already rounded to the build dtype, so the only error left is the
# accumulation/rounding of the result: a few ulps of |y| (~3) at the dtype's epsilon.
DTYPES = [
    (ir.DataType.FLOAT, np.float32, 1e-5),
    (ir.DataType.FLOAT16, np.float16, 4 * 2**-10 * 3),
    (ir.DataType.BFLOAT16, ml_dtypes.bfloat16, 4 * 2**-7 * 3),
]


def _run(tmp_path, dtype, weights, x, bias: bool):
    with build_context(None, dtype):
        linear = Linear(IN, OUT, bias=bias)
    attach_arrays(linear, weights, tmp_path)
    model = component_model([("x", dtype, ["batch", "seq", IN])],
                            lambda op, x_: linear(op, x_), ["y"])
    runner = run_reference if dtype == ir.DataType.BFLOAT16 else run_model
    (y,) = runner(model, {"x": x})
    return y


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("dtype, np_dtype, atol", DTYPES, ids=["f32", "f16", "bf16"])
def test_linear_matches_reference(tmp_path, dtype, np_dtype, atol, bias):
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((OUT, IN)) * 0.3).astype(np.float32)
    weights = {"weight": weight}
    if bias:
        weights["bias"] = rng.standard_normal(OUT).astype(np.float32)
    x = rng.standard_normal((2, 3, IN)).astype(np_dtype)
    y = _run(tmp_path, dtype, weights, x, bias)
    assert y.dtype == np.dtype(np_dtype) and y.shape == (2, 3, OUT)
    w = weight.astype(np_dtype).astype(np.float64)
    expected = x.astype(np.float64) @ w.T
    if bias:
        expected += weights["bias"].astype(np_dtype).astype(np.float64)
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=0, atol=atol)


def test_bias_really_is_added(tmp_path):
    rng = np.random.default_rng(1)
    weights = {"weight": rng.standard_normal((OUT, IN)).astype(np.float32),
               "bias": np.full(OUT, 100.0, np.float32)}
    x = np.zeros((1, 1, IN), np.float32)
    np.testing.assert_array_equal(_run(tmp_path, ir.DataType.FLOAT, weights, x, True),
                                  np.full((1, 1, OUT), 100.0, np.float32))


def test_initializer_is_stored_pre_transposed(tmp_path):
    weight = np.arange(OUT * IN, dtype=np.float32).reshape(OUT, IN)
    with build_context(None, ir.DataType.FLOAT):
        linear = Linear(IN, OUT)
    attach_arrays(linear, {"weight": weight}, tmp_path)
    stored = linear.weight.const_value.numpy()
    assert stored.shape == (IN, OUT)
    np.testing.assert_array_equal(stored, weight.T)


def test_weight_in_matmul_layout_is_rejected_with_both_shapes(tmp_path):
    with build_context(None, ir.DataType.FLOAT):
        linear = Linear(IN, OUT)
    with pytest.raises(WeightsError, match=r"'weight' has shape \[24, 10\].*expects \[10, 24\]"):
        attach_arrays(linear, {"weight": np.zeros((IN, OUT), np.float32)}, tmp_path)


def test_missing_bias_is_named(tmp_path):
    with build_context(None, ir.DataType.FLOAT):
        linear = Linear(IN, OUT, bias=True)
    with pytest.raises(WeightsError, match="missing tensor 'bias'"):
        attach_arrays(linear, {"weight": np.zeros((OUT, IN), np.float32)}, tmp_path)
