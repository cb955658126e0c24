"""Attention: GQA / MQA / MHA, KV cache (present = past ++ new), sliding window,
left padding, QKV/O bias, per-head QK norm, partial rotary, custom scale.

The ONNX side is the real model path: RotaryEmbedding -> causal_padding_mask ->
Attention, in one standalone graph. The reference is written in torch from the
definitions (testing/references.py).
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import onnx_ir as ir
import pytest

import torch

from mobius.components.attention import Attention
from mobius.components.attention_mask import causal_padding_mask
from mobius.components.rms_norm import RMSNorm
from mobius.components.rotary import RotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.parity import position_ids_for
from testing.references import additive_mask, apply_rotary, gqa_attention

HIDDEN = 48


@dataclasses.dataclass(frozen=True)
class Case:
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    partial: float = 1.0
    past: int = 0
    seq: int = 7
    pad: int = 3  # left padding of row 1, counted over the whole (past + new) sequence
    window: int | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    scale: float | None = None


CASES = {
    "mha_prefill": Case(kv_heads=4),
    "gqa_prefill_left_padded": Case(),
    "gqa_decode_with_cache": Case(past=6, seq=1),
    "gqa_chunk_with_cache": Case(past=6, seq=3),
    "sliding_window_prefill": Case(seq=9, window=4),
    "sliding_window_decode": Case(past=8, seq=1, window=4, pad=2),
    "mqa_bias_qk_norm": Case(kv_heads=1, past=4, seq=2, qkv_bias=True, o_bias=True,
                             qk_norm=True),
    "partial_rotary": Case(partial=0.5, past=3, seq=4),
    "head_dim_not_hidden_over_heads": Case(head_dim=32, past=2, seq=3),
    "custom_scale": Case(scale=0.05, past=2, seq=3),
}


def _weights(case: Case, rng) -> dict[str, np.ndarray]:
    h, kv, d = case.heads, case.kv_heads, case.head_dim
    w = {
        "q_proj.weight": rng.standard_normal((h * d, HIDDEN)) * 0.2,
        "k_proj.weight": rng.standard_normal((kv * d, HIDDEN)) * 0.2,
        "v_proj.weight": rng.standard_normal((kv * d, HIDDEN)) * 0.2,
        "o_proj.weight": rng.standard_normal((HIDDEN, h * d)) * 0.2,
    }
    if case.qkv_bias:
        w["q_proj.bias"] = rng.standard_normal(h * d) * 0.5
        w["k_proj.bias"] = rng.standard_normal(kv * d) * 0.5
        w["v_proj.bias"] = rng.standard_normal(kv * d) * 0.5
    if case.o_bias:
        w["o_proj.bias"] = rng.standard_normal(HIDDEN) * 0.5
    if case.qk_norm:
        w["q_norm.weight"] = 1 + 0.3 * rng.standard_normal(d)
        w["k_norm.weight"] = 1 + 0.3 * rng.standard_normal(d)
    return {k: v.astype(np.float32) for k, v in w.items()}


def _rms(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def _reference(case, w, hidden, cos, sin, mask, past_key, past_value, rotary_dim):
    t = {k: torch.from_numpy(v) for k, v in w.items()}
    x = torch.from_numpy(hidden)
    b, s, _ = x.shape

    def project(name, heads):
        y = x @ t[f"{name}.weight"].T
        if f"{name}.bias" in t:
            y = y + t[f"{name}.bias"]
        y = y.view(b, s, heads, case.head_dim)
        norm = {"q_proj": "q_norm.weight", "k_proj": "k_norm.weight"}.get(name)
        if norm in t:
            y = _rms(y, t[norm], 1e-6)
        return y.transpose(1, 2)

    q, k, v = project("q_proj", case.heads), project("k_proj", case.kv_heads), project(
        "v_proj", case.kv_heads)
    q = apply_rotary(q, cos, sin, rotary_dim)
    k = apply_rotary(k, cos, sin, rotary_dim)
    k = torch.cat([torch.from_numpy(past_key), k], dim=2)
    v = torch.cat([torch.from_numpy(past_value), v], dim=2)
    scale = case.scale if case.scale is not None else case.head_dim**-0.5
    out = gqa_attention(q, k, v, torch.from_numpy(mask.astype(np.float32)), scale)
    out = out.transpose(1, 2).reshape(b, s, case.heads * case.head_dim) @ t["o_proj.weight"].T
    if "o_proj.bias" in t:
        out = out + t["o_proj.bias"]
    return out.numpy(), k.numpy(), v.numpy()


@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_matches_reference(name, tmp_path):
    case = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # str hash() varies per process
    batch, total = 2, case.past + case.seq
    raw = {"model_type": "llama", "vocab_size": 97, "hidden_size": HIDDEN,
           "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": case.heads,
           "num_key_value_heads": case.kv_heads, "head_dim": case.head_dim,
           "max_position_embeddings": 64, "partial_rotary_factor": case.partial,
           "rope_theta": 10000.0}
    config = ArchitectureConfig.from_dict(raw)
    rotary_dim = config.rope.rotary_dim

    with build_context(None, ir.DataType.FLOAT):
        rotary = RotaryEmbedding(config.rope)
        attention = Attention(HIDDEN, case.heads, case.kv_heads, case.head_dim, rotary_dim,
                              qkv_bias=case.qkv_bias, o_bias=case.o_bias,
                              q_norm=RMSNorm(case.head_dim, 1e-6) if case.qk_norm else None,
                              k_norm=RMSNorm(case.head_dim, 1e-6) if case.qk_norm else None,
                              scale=case.scale)
    weights = _weights(case, rng)
    attach_arrays(attention, weights, tmp_path)

    def forward(op, input_ids, attention_mask, position_ids, hidden, past_key, past_value):
        cos, sin = rotary(op, position_ids)
        mask = causal_padding_mask(op, input_ids, attention_mask, ir.DataType.FLOAT, case.window,
                                   position_ids)
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

    attention_mask = np.ones((batch, total), np.int64)
    attention_mask[1, : case.pad] = 0
    position_ids = position_ids_for(attention_mask, case.seq)
    hidden = rng.standard_normal((batch, case.seq, HIDDEN)).astype(np.float32)
    past_key = rng.standard_normal((batch, case.kv_heads, case.past, case.head_dim)).astype(
        np.float32)
    past_value = rng.standard_normal(past_key.shape).astype(np.float32)
    out, present_key, present_value = run_model(model, {
        "input_ids": np.zeros((batch, case.seq), np.int64), "attention_mask": attention_mask,
        "position_ids": position_ids, "hidden": hidden, "past_key": past_key,
        "past_value": past_value,
    })

    # cos/sin by definition (plain RoPE over the rotary dims; frequencies vs transformers
    # are covered by rotary_test.py / rope_test.py).
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, rotary_dim, 2) / rotary_dim)
    angles = torch.from_numpy(position_ids[..., None] * inv_freq).float()
    mask = additive_mask(attention_mask, case.seq, case.window, float(np.finfo(np.float32).min))
    with torch.no_grad():
        ref_out, ref_key, ref_value = _reference(case, weights, hidden, angles.cos(), angles.sin(),
                                                 mask, past_key, past_value, rotary_dim)

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
