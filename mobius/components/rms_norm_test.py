"""RMSNorm (ONNX RMSNormalization, statistics in float32) vs transformers' LlamaRMSNorm,
recorded at build time on the same inputs (rms_norm_cases.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import rms_norm_cases as cases
from mobius.components.rms_norm import RMSNorm
from mobius.context import build_context
from testing.onnx_graphs import (
    attach_arrays,
    component_model,
    run_model,
    run_reference,
)
from testing.recorded_arrays import load

SIZE = cases.SIZE


def _run(tmp_path, dtype, weight, x, eps):
    with build_context(None, dtype):
        norm = RMSNorm(SIZE, eps)
    attach_arrays(norm, {"weight": weight}, tmp_path)
    model = component_model([("x", dtype, ["batch", "seq", SIZE])],
                            lambda op, x_: norm(op, x_), ["y"])
    runner = run_reference if dtype == ir.DataType.BFLOAT16 else run_model
    (y,) = runner(model, {"x": x})
    return y


@pytest.mark.parametrize("eps", [1e-6, 1e-5])
def test_f32_matches_transformers(tmp_path, eps):
    run = load(cases, f"f32_eps_{eps:g}")
    assert run["eps"] == eps
    np.testing.assert_allclose(_run(tmp_path, ir.DataType.FLOAT, run["weight"], run["x"], eps),
                               run["y"], rtol=1e-5, atol=1e-6)


def test_epsilon_is_used(tmp_path):
    # With inputs ~1e-3, eps=1e-2 dominates the mean square: a dropped eps changes y ~25x.
    run = load(cases, "epsilon")
    assert run["eps"] == 1e-2 and (run["weight"] == 1).all()
    got = _run(tmp_path, ir.DataType.FLOAT, run["weight"], run["x"], 1e-2)
    np.testing.assert_allclose(got, run["y"], rtol=1e-5)
    assert np.abs(got).max() < 0.1


@pytest.mark.parametrize("dtype, np_dtype, rtol", [
    (ir.DataType.FLOAT16, np.float16, 2 * 2**-10),
    (ir.DataType.BFLOAT16, ml_dtypes.bfloat16, 2 * 2**-7),
], ids=["f16", "bf16"])
def test_half_precision(tmp_path, dtype, np_dtype, rtol):
    run = load(cases, "f16" if dtype == ir.DataType.FLOAT16 else "bf16")
    x = run["x"].astype(np_dtype)
    assert (x.astype(np.float32) == run["x"]).all()  # stored exactly
    got = _run(tmp_path, dtype, run["weight"], x, 1e-6)
    assert got.dtype == np.dtype(np_dtype)
    # Reference in f32 from the same rounded inputs/weights: one final rounding + a little.
    np.testing.assert_allclose(got.astype(np.float32), run["y"], rtol=rtol, atol=rtol)


def test_f16_statistics_do_not_overflow(tmp_path):
    # 300^2 = 90000 overflows float16 (max 65504): the mean square must be taken in float32.
    x = np.full((1, 1, SIZE), 300.0, np.float16)
    x[0, 0, ::2] = -300.0
    weight = np.ones(SIZE, np.float32)
    got = _run(tmp_path, ir.DataType.FLOAT16, weight, x, 1e-6)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got.astype(np.float32), np.sign(x.astype(np.float32)), atol=2e-3)
