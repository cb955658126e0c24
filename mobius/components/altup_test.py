"""AltUp (mobius/components/altup.py) and gaussian top-k (gaussian_topk.py) vs numpy
written from their definitions (Gemma 3n): streams widened at the input's magnitude,
predicted by the router-weighted mix, corrected by the active stream's error, collapsed
to their magnitude-matched mean; the sparse gate keeps what lies above mean + std *
Phi^-1(s), shifted down by that cutoff."""

from __future__ import annotations

import statistics

import numpy as np
import onnx_ir as ir
import pytest
from onnxscript import nn

from mobius.components.altup import AltUp, collapse_streams, expand_streams
from mobius.components.gaussian_topk import gaussian_topk
from mobius.components.linear import Linear
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model

HIDDEN, STREAMS, ACTIVE, EPS = 12, 3, 1, 1e-6
F32 = ir.DataType.FLOAT


def _rms_norm(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def _at_magnitude(x, magnitude):
    return x * magnitude / np.sqrt(np.maximum((x * x).mean(-1, keepdims=True), 1e-5))


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(0)
    shapes = {"altup.correct_output_scale": (HIDDEN,),
              "altup.correction_coefs.weight": (STREAMS, STREAMS),
              "altup.prediction_coefs.weight": (STREAMS * STREAMS, STREAMS),
              "altup.modality_router.weight": (STREAMS, HIDDEN),
              "altup.router_norm.weight": (HIDDEN,)}
    shapes.update({f"{kind}.{i}.weight": (HIDDEN, HIDDEN) for kind in ("up", "down")
                   for i in range(STREAMS - 1)})
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _reference(w, x, layer_out):
    """Expand x; predict; correct with layer_out(active prediction); scale; collapse."""
    magnitude = np.sqrt((x * x).mean(-1, keepdims=True))
    streams = [x] + [_at_magnitude(x @ w[f"up.{i}.weight"].T, magnitude)
                     for i in range(STREAMS - 1)]

    def modalities(h):
        routed = _rms_norm(h, w["altup.router_norm.weight"]) / HIDDEN
        return np.tanh(routed @ w["altup.modality_router.weight"].T)

    coefs = modalities(streams[ACTIVE]) @ w["altup.prediction_coefs.weight"].T
    predicted = [streams[j] + sum(streams[i] * coefs[..., j * STREAMS + i, None]
                                  for i in range(STREAMS)) for j in range(STREAMS)]
    activated = layer_out(predicted[ACTIVE])
    gains = modalities(activated) @ w["altup.correction_coefs.weight"].T + 1
    corrected = [p + (activated - predicted[ACTIVE]) * gains[..., i, None]
                 for i, p in enumerate(predicted)]
    scaled = corrected[ACTIVE] * w["altup.correct_output_scale"]
    magnitude = np.sqrt((corrected[0] ** 2).mean(-1, keepdims=True))
    outs = [corrected[0]] + [_at_magnitude(corrected[i + 1] @ w[f"down.{i}.weight"].T, magnitude)
                             for i in range(STREAMS - 1)]
    return np.mean(outs, axis=0), scaled


class _Holder(nn.Module):
    """AltUp with the body's stream projections (``up``: widen, ``down``: collapse)."""

    def __init__(self):
        super().__init__()
        self.altup = AltUp(HIDDEN, STREAMS, ACTIVE, EPS)
        self.up = nn.ModuleList([Linear(HIDDEN, HIDDEN) for _ in range(STREAMS - 1)])
        self.down = nn.ModuleList([Linear(HIDDEN, HIDDEN) for _ in range(STREAMS - 1)])


def test_altup_matches_the_definition(weights, tmp_path):
    with build_context(None, F32):
        holder = _Holder()
    attach_arrays(holder, weights, tmp_path)

    def forward(op, x):
        streams = expand_streams(op, x, list(holder.up))
        predicted = holder.altup.predict(op, streams)
        active = op.Gather(predicted, op.Constant(value_int=ACTIVE), axis=-1)
        corrected = holder.altup.correct(op, predicted, op.Tanh(active))
        scaled = holder.altup(op, op.Gather(corrected, op.Constant(value_int=ACTIVE), axis=-1))
        return collapse_streams(op, corrected, list(holder.down)), scaled

    model = component_model([("x", F32, [2, 5, HIDDEN])], forward, ["y", "scaled"])
    x = np.random.default_rng(1).standard_normal((2, 5, HIDDEN)).astype(np.float32)
    y, scaled = run_model(model, {"x": x})
    want_y, want_scaled = _reference(weights, x, np.tanh)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(scaled, want_scaled, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sparsity", [0.95, 0.5, 0.3])
def test_gaussian_topk_keeps_what_lies_above_the_cutoff(sparsity):
    with build_context(None, F32):
        model = component_model([("x", F32, [3, 40])],
                                lambda op, x: gaussian_topk(op, x, sparsity), ["y"])
    x = np.random.default_rng(2).standard_normal((3, 40)).astype(np.float32)
    (y,) = run_model(model, {"x": x})
    cutoff = x.mean(-1, keepdims=True) + x.std(-1, keepdims=True) * statistics.NormalDist(
        ).inv_cdf(sparsity)
    np.testing.assert_allclose(y, np.maximum(x - cutoff, 0), rtol=1e-5, atol=1e-6)
