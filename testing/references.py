"""Plain numpy / torch reference implementations for component tests.

Written from the definitions (not from mobius' code), loop-by-loop where that
keeps them obviously right.
"""

from __future__ import annotations

import numpy as np


def additive_mask(attention_mask: np.ndarray, seq_len: int, window: int | None,
                  blocked: float) -> np.ndarray:
    """[batch, 1, seq, total]: 0 where query i (cache slot past+i) may see slot j, else ``blocked``.

    Visible: j <= past + i, attention_mask[b, j] == 1, and (window) past + i - j < window.
    """
    batch, total = attention_mask.shape
    past = total - seq_len
    out = np.full((batch, 1, seq_len, total), blocked, dtype=np.float64)
    for b in range(batch):
        for i in range(seq_len):
            q = past + i
            for j in range(total):
                if j > q or attention_mask[b, j] == 0:
                    continue
                if window is not None and q - j >= window:
                    continue
                out[b, 0, i, j] = 0.0
    return out


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1) if isinstance(
        x, np.ndarray) else _torch_rotate_half(x)


def _torch_rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x, cos_half, sin_half, rotary_dim: int):
    """x [b, h, s, d]; cos/sin [b, s, rotary_dim/2] (the half-table mobius carries).

    Rotates the first ``rotary_dim`` dims (rotate-half convention), passes the rest.
    """
    import torch

    cos = torch.cat([cos_half, cos_half], dim=-1)[:, None]
    sin = torch.cat([sin_half, sin_half], dim=-1)[:, None]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    rotated = rot * cos + _torch_rotate_half(rot) * sin
    return torch.cat([rotated, rest], dim=-1)


def gqa_attention(q, k, v, mask, scale: float):
    """q [b, h, s, d], k/v [b, kv, t, d] (kv divides h), additive mask [b, 1, s, t].

    Query head i reads kv head i // (h / kv), as transformers' repeat_kv does.
    """
    import torch

    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale + mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)
