"""chosen_routing: any k-expert choice with positive weights, as renormalized softmax top-k."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import chosen_routing as cr
from testing.onnx_graphs import component_model, run_model

F32, F16 = ir.DataType.FLOAT, ir.DataType.FLOAT16
SHAPE = [3, 5, 8]


def _choice(rng, k):
    """A [3, 5, 8] bool choice of k experts per token that is not the top-k of the weights."""
    scores = rng.standard_normal(SHAPE)
    kth = np.sort(scores, -1)[..., -k][..., None]
    return scores >= kth


@pytest.mark.parametrize("dtype,tol", [(F32, 1e-6), (F16, 2e-3)])
@pytest.mark.parametrize("k", [1, 3])
def test_routing_is_the_chosen_weights_renormalized(dtype, tol, k):
    rng = np.random.default_rng(k)
    chosen = _choice(rng, k)
    weights = rng.uniform(0.01, 1.0, SHAPE).astype(np.float32)
    np_dtype = np.float32 if dtype == F32 else np.float16
    model = component_model(
        [("log_w", dtype, SHAPE), ("chosen", ir.DataType.BOOL, SHAPE)],
        lambda op, log_w, c: cr.chosen_routing(op, log_w, c, k, dtype), ["routing"])
    (got,) = run_model(model, {"log_w": np.log(weights).astype(np_dtype), "chosen": chosen})
    kept = np.where(chosen, weights, 0.0)
    expected = kept / kept.sum(-1, keepdims=True)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=tol, atol=1e-7)
    assert ((got > 0) == chosen).all()


def test_chosen_sum_and_token_scale():
    rng = np.random.default_rng(0)
    chosen = _choice(rng, 2)
    weights = rng.uniform(0.0, 1.0, SHAPE).astype(np.float32)
    out = rng.standard_normal([3, 5, 4]).astype(np.float16)

    def forward(op, w, c, x):
        return cr.scale_tokens(op, x, cr.chosen_sum(op, w, c), F16)

    model = component_model(
        [("w", F32, SHAPE), ("c", ir.DataType.BOOL, SHAPE), ("x", F16, [3, 5, 4])],
        forward, ["y"])
    (got,) = run_model(model, {"w": weights, "c": chosen, "x": out})
    total = np.where(chosen, weights, 0.0).sum(-1, keepdims=True)
    np.testing.assert_allclose(got.astype(np.float32), out.astype(np.float32) * total,
                               rtol=2e-3, atol=1e-3)
