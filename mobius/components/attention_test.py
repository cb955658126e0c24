"""Attention: GQA / MQA / MHA, KV cache (present = past ++ new), sliding window,
left padding, QKV/O bias, per-head QK norm, partial rotary, custom scale.

The ONNX side is the real model path: RotaryEmbedding -> causal_padding_mask ->
Attention, in one standalone graph. The reference is written in torch from the
definitions (testing/references.py), recorded at build time (attention_cases.py).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import attention_cases as cases
from mobius.components.attention import Attention
from mobius.components.attention_mask import causal_padding_mask
from mobius.components.rms_norm import RMSNorm
from mobius.components.rotary import RotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.recorded_arrays import load
from testing.references import additive_mask

HIDDEN = cases.HIDDEN
CASES = cases.ATTENTION


@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_matches_reference(name, tmp_path):
    case = CASES[name]
    batch, total = cases.BATCH, case.past + case.seq
    raw = {"model_type": "llama", "vocab_size": 97, "hidden_size": HIDDEN,
           "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": case.heads,
           "num_key_value_heads": case.kv_heads, "head_dim": case.head_dim,
           "max_position_embeddings": 64, "partial_rotary_factor": case.partial,
           "rope_theta": 10000.0}
    config = ArchitectureConfig.from_dict(raw)
    rotary_dim = config.rope.rotary_dim
    assert rotary_dim == case.rotary_dim  # the reference's rotary dims

    with build_context(None, ir.DataType.FLOAT):
        rotary = RotaryEmbedding(config.rope)
        attention = Attention(HIDDEN, case.heads, case.kv_heads, case.head_dim, rotary_dim,
                              qkv_bias=case.qkv_bias, o_bias=case.o_bias,
                              q_norm=RMSNorm(case.head_dim, 1e-6) if case.qk_norm else None,
                              k_norm=RMSNorm(case.head_dim, 1e-6) if case.qk_norm else None,
                              scale=case.scale)
    weights = load(cases, name, "state")
    attach_arrays(attention, weights, tmp_path)

    def forward(op, input_ids, attention_mask, position_ids, hidden, past_key, past_value):
        cos, sin = rotary(op, position_ids)
        mask = causal_padding_mask(op, input_ids, attention_mask, ir.DataType.FLOAT, case.window)
        return attention(op, hidden, cos, sin, mask, past_key, past_value)

    f32, i64 = ir.DataType.FLOAT, ir.DataType.INT64
    kv_shape = ["batch", case.kv_heads, "past", case.head_dim]
    model = component_model(
        inputs=[("input_ids", i64, ["batch", "seq"]), ("attention_mask", i64, ["batch", "total"]),
                ("position_ids", i64, ["batch", "seq"]), ("hidden", f32, ["batch", "seq", HIDDEN]),
                ("past_key", f32, kv_shape), ("past_value", f32, kv_shape)],
        forward=forward,
        outputs=["out", ("present_key", ["batch", case.kv_heads, "total", case.head_dim]),
                 ("present_value", ["batch", case.kv_heads, "total", case.head_dim])],
    )

    recorded = load(cases, name)
    attention_mask, position_ids = recorded["attention_mask"], recorded["position_ids"]
    hidden, past_key, past_value = recorded["hidden"], recorded["past_key"], recorded["past_value"]
    assert attention_mask.shape == (batch, total) and not attention_mask[1, : case.pad].any()
    out, present_key, present_value = run_model(model, {
        "input_ids": np.zeros((batch, case.seq), np.int64), "attention_mask": attention_mask,
        "position_ids": position_ids, "hidden": hidden, "past_key": past_key,
        "past_value": past_value,
    })

    ref_out, ref_key, ref_value = (recorded["out"], recorded["present_key"],
                                   recorded["present_value"])

    assert present_key.shape == (batch, case.kv_heads, total, case.head_dim)
    np.testing.assert_allclose(present_key, ref_key, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(present_value, ref_value, rtol=1e-5, atol=1e-5)
    # The cache prefix is passed through untouched.
    np.testing.assert_array_equal(present_key[:, :, : case.past], past_key)
    # Queries that are themselves padding see nothing; their output is undefined.
    real = attention_mask[:, case.past:].astype(bool)
    assert out.shape == (batch, case.seq, HIDDEN)
    np.testing.assert_allclose(out[real], ref_out[real], rtol=1e-4, atol=1e-5)
    assert np.isfinite(out).all()


def test_sliding_window_changes_the_result(tmp_path):
    """Guards the sliding-window cases: the window must actually hide keys here."""
    case = CASES["sliding_window_decode"]
    mask = additive_mask(np.ones((1, case.past + case.seq), np.int64), case.seq, case.window, -1.0)
    assert (mask == -1.0).sum() > 0
    full = additive_mask(np.ones((1, case.past + case.seq), np.int64), case.seq, None, -1.0)
    assert (mask != full).any()
