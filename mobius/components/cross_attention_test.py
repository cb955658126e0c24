"""ProjectedAttention vs a numpy reference: self-attention with a cache and a causal
mask, and cross-attention over precomputed keys/values (key bias on and off)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.cross_attention import ProjectedAttention
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model

HIDDEN, HEADS = 12, 3
F32 = ir.DataType.FLOAT


def _weights(rng, key_bias: bool) -> dict[str, np.ndarray]:
    arrays = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        arrays[f"{name}.weight"] = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32) / 3
        if name != "k_proj" or key_bias:
            arrays[f"{name}.bias"] = rng.standard_normal(HIDDEN).astype(np.float32)
    return arrays


def _linear(w, name, x):
    y = x @ w[f"{name}.weight"].T
    return y + w[f"{name}.bias"] if f"{name}.bias" in w else y


def _heads(x):
    return x.reshape(x.shape[0], x.shape[1], HEADS, -1).transpose(0, 2, 1, 3)


def _reference(w, hidden, key, value, mask):
    query = _heads(_linear(w, "q_proj", hidden))
    scores = query @ key.transpose(0, 1, 3, 2) / np.sqrt(HIDDEN // HEADS) + mask
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    attn = (probs / probs.sum(-1, keepdims=True)) @ value
    return _linear(w, "out_proj", attn.transpose(0, 2, 1, 3).reshape(hidden.shape))


@pytest.mark.parametrize("key_bias", [True, False])
def test_self_attention_with_cache_and_cross_attention(tmp_path, key_bias):
    rng = np.random.default_rng(0)
    w = _weights(rng, key_bias)
    with build_context(None, F32):
        attention = ProjectedAttention(HIDDEN, HEADS, key_bias)
    attach_arrays(attention, w, tmp_path)
    dim = HIDDEN // HEADS

    def forward(op, x, mask, past_key, past_value, states):
        out, key, value = attention(op, x, mask, past_key, past_value)
        cross_key, cross_value = attention.project_key_value(op, states)
        cross, _, _ = attention(op, x, None, key=cross_key, value=cross_value)
        return out, key, cross

    model = component_model(
        [("x", F32, [2, 3, HIDDEN]), ("mask", F32, [2, 1, 3, 5]),
         ("past_key", F32, [2, HEADS, 2, dim]), ("past_value", F32, [2, HEADS, 2, dim]),
         ("states", F32, [2, 4, HIDDEN])], forward, ["out", "key", "cross"])
    x, states = rng.standard_normal((2, 3, HIDDEN)), rng.standard_normal((2, 4, HIDDEN))
    past_key, past_value = rng.standard_normal((2, 2, HEADS, 2, dim))
    mask = np.where(np.arange(5)[None, :] <= np.arange(3)[:, None] + 2, 0, -1e9)
    mask = np.broadcast_to(mask, (2, 1, 3, 5))
    feeds = {k: np.ascontiguousarray(v, np.float32) for k, v in dict(
        x=x, mask=mask, past_key=past_key, past_value=past_value, states=states).items()}
    out, key, cross = run_model(model, feeds)
    full_key = np.concatenate([past_key, _heads(_linear(w, "k_proj", x))], axis=2)
    full_value = np.concatenate([past_value, _heads(_linear(w, "v_proj", x))], axis=2)
    np.testing.assert_allclose(key, full_key, atol=1e-5)
    np.testing.assert_allclose(out, _reference(w, x, full_key, full_value, mask), atol=1e-5)
    expected = _reference(w, x, _heads(_linear(w, "k_proj", states)),
                          _heads(_linear(w, "v_proj", states)), 0)
    np.testing.assert_allclose(cross, expected, atol=1e-5)
