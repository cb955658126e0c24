"""torch's side of attention_test (//rules:references.bzl): attention written in torch from
the definitions (testing/references.py) on each case's random weights and inputs.

A case folder holds state.npz (the weights by checkpoint name) and arrays.npz: the inputs
(attention_mask, position_ids, hidden, past_key, past_value) and the reference's out,
present_key and present_value.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np

HIDDEN = 48
BATCH = 2


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

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial)


ATTENTION = {
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
CASES = sorted(ATTENTION)


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
    import torch

    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps) * weight


def _reference(case, w, hidden, cos, sin, mask, past_key, past_value):
    import torch

    from testing.references import apply_rotary, gqa_attention

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
    q = apply_rotary(q, cos, sin, case.rotary_dim)
    k = apply_rotary(k, cos, sin, case.rotary_dim)
    k = torch.cat([torch.from_numpy(past_key), k], dim=2)
    v = torch.cat([torch.from_numpy(past_value), v], dim=2)
    scale = case.scale if case.scale is not None else case.head_dim**-0.5
    out = gqa_attention(q, k, v, torch.from_numpy(mask.astype(np.float32)), scale)
    out = out.transpose(1, 2).reshape(b, s, case.heads * case.head_dim) @ t["o_proj.weight"].T
    if "o_proj.bias" in t:
        out = out + t["o_proj.bias"]
    return out.numpy(), k.numpy(), v.numpy()


def _inputs(name: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The case's weights and inputs, drawn from a seed of its name."""
    from testing.parity import position_ids_for

    case = ATTENTION[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # str hash() varies per process
    weights = _weights(case, rng)
    attention_mask = np.ones((BATCH, case.past + case.seq), np.int64)
    attention_mask[1, : case.pad] = 0
    hidden = rng.standard_normal((BATCH, case.seq, HIDDEN)).astype(np.float32)
    past_key = rng.standard_normal((BATCH, case.kv_heads, case.past, case.head_dim)).astype(
        np.float32)
    past_value = rng.standard_normal(past_key.shape).astype(np.float32)
    return weights, {"attention_mask": attention_mask,
                     "position_ids": position_ids_for(attention_mask, case.seq),
                     "hidden": hidden, "past_key": past_key, "past_value": past_value}


def write_case(name: str, folder: str) -> None:
    """state.npz and arrays.npz (see the module docstring)."""
    import torch

    from testing import recorded_arrays
    from testing.references import additive_mask

    case = ATTENTION[name]
    weights, inputs = _inputs(name)
    # cos/sin by definition (plain RoPE over the rotary dims; frequencies vs transformers
    # are covered by rotary_test.py / rope_test.py).
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, case.rotary_dim, 2) / case.rotary_dim)
    angles = torch.from_numpy(inputs["position_ids"][..., None] * inv_freq).float()
    mask = additive_mask(inputs["attention_mask"], case.seq, case.window,
                         float(np.finfo(np.float32).min))
    with torch.no_grad():
        out, key, value = _reference(case, weights, inputs["hidden"], angles.cos(),
                                     angles.sin(), mask, inputs["past_key"],
                                     inputs["past_value"])
    recorded_arrays.save(folder, weights, "state")
    recorded_arrays.save(folder, {**inputs, "out": out, "present_key": key,
                                  "present_value": value})
