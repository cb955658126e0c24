"""ShortConv (LFM2's gated short convolution with a carried state) vs a numpy reference.

The reference is the definition: y_t = sum_k w[k] * (B*x)[t - K + 1 + k] over the real
history (zeros before the first token), gated by C, projected; the state is the gated input
of the last K - 1 real positions. Checked: a prefill, the same tokens as a prefill plus
cached single steps, and padding on either side (the state ends at the last real token).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.short_conv import ShortConv, chunk_inputs
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model

HIDDEN, KERNEL = 12, 4
WIDTH = KERNEL - 1
F32 = ir.DataType.FLOAT


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(0)
    shapes = {"in_proj.weight": (3 * HIDDEN, HIDDEN), "in_proj.bias": (3 * HIDDEN,),
              "out_proj.weight": (HIDDEN, HIDDEN), "out_proj.bias": (HIDDEN,),
              "conv.weight": (HIDDEN, 1, KERNEL), "conv.bias": (HIDDEN,)}
    return {k: (0.5 * rng.standard_normal(s)).astype(np.float32) for k, s in shapes.items()}


@pytest.fixture(scope="module")
def model(weights, tmp_path_factory):
    with build_context(None, F32):
        conv = ShortConv(HIDDEN, KERNEL, bias=True)
    attach_arrays(conv, weights, tmp_path_factory.mktemp("w"))

    def forward(op, hidden, mask, past):
        return conv(op, hidden, chunk_inputs(op, mask, F32, WIDTH), past)

    return component_model([("hidden", F32, ["b", "s", HIDDEN]), ("mask", ir.DataType.INT64,
                                                                   ["b", "s"]),
                            ("past", F32, ["b", HIDDEN, WIDTH])], forward,
                           [("y", ["b", "s", HIDDEN]), ("present", ["b", HIDDEN, WIDTH])])


def _reference(w, hidden, mask, past):
    """One row: hidden [s, hidden], mask [s], past [hidden, width] -> (y, present)."""
    h = hidden * mask[:, None]
    b, c, x = np.split(h @ w["in_proj.weight"].T + w["in_proj.bias"], 3, axis=-1)
    window = np.concatenate([past.T, b * x])  # [width + s, hidden]
    kernel = w["conv.weight"][:, 0, :].T  # [K, hidden]
    conv = np.stack([(window[t:t + KERNEL] * kernel).sum(0) for t in range(len(h))])
    y = (c * (conv + w["conv.bias"])) @ w["out_proj.weight"].T + w["out_proj.bias"]
    last = int(np.max(np.nonzero(mask)[0], initial=-1)) + 1
    return y, window[last:last + WIDTH].T


def _run(model, hidden, mask, past):
    return run_model(model, {"hidden": hidden, "mask": mask, "past": past}, check=False)


def test_prefill_matches_the_definition(model, weights):
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((2, 7, HIDDEN)).astype(np.float32)
    past = rng.standard_normal((2, HIDDEN, WIDTH)).astype(np.float32)
    mask = np.ones((2, 7), np.int64)
    y, present = _run(model, hidden, mask, past)
    for row in range(2):
        want_y, want_present = _reference(weights, hidden[row], mask[row], past[row])
        np.testing.assert_allclose(y[row], want_y, atol=1e-5)
        np.testing.assert_allclose(present[row], want_present, rtol=1e-5, atol=1e-5)


def test_cached_steps_equal_one_prefill(model):
    rng = np.random.default_rng(2)
    hidden = rng.standard_normal((1, 6, HIDDEN)).astype(np.float32)
    zeros = np.zeros((1, HIDDEN, WIDTH), np.float32)
    full, full_state = _run(model, hidden, np.ones((1, 6), np.int64), zeros)
    y, state = _run(model, hidden[:, :2], np.ones((1, 2), np.int64), zeros)  # shorter than K
    steps = [y]
    for t in range(2, 6):
        y, state = _run(model, hidden[:, t:t + 1], np.ones((1, 1), np.int64), state)
        steps.append(y)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)
    np.testing.assert_allclose(state, full_state, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_the_state_ends_at_the_last_real_token(model, weights, side):
    """Right padding (onnxruntime-genai's batches): the state is the real tokens', as if
    unpadded. Left padding (transformers'): the padding's in_proj bias enters the window,
    exactly as transformers computes it (the reference zeroes the same inputs)."""
    rng = np.random.default_rng(3)
    hidden = rng.standard_normal((1, 7, HIDDEN)).astype(np.float32)
    mask = np.array([[1, 1, 1, 1, 1, 0, 0]] if side == "right" else [[0, 0, 1, 1, 1, 1, 1]])
    zeros = np.zeros((1, HIDDEN, WIDTH), np.float32)
    y, present = _run(model, hidden, mask, zeros)
    want_y, want_present = _reference(weights, hidden[0], mask[0], zeros[0])
    real = mask[0].astype(bool)
    np.testing.assert_allclose(y[0][real], want_y[real], atol=1e-5)
    np.testing.assert_allclose(present[0], want_present, rtol=1e-5, atol=1e-5)
    if side == "right":  # the same as the real tokens alone
        _, alone = _run(model, hidden[:, :5], np.ones((1, 5), np.int64), zeros)
        np.testing.assert_allclose(present, alone, rtol=1e-5, atol=1e-5)


def test_a_chunk_without_real_tokens_keeps_the_state(model):
    rng = np.random.default_rng(4)
    past = rng.standard_normal((1, HIDDEN, WIDTH)).astype(np.float32)
    hidden = rng.standard_normal((1, 2, HIDDEN)).astype(np.float32)
    _, present = _run(model, hidden, np.zeros((1, 2), np.int64), past)
    np.testing.assert_array_equal(present, past)
