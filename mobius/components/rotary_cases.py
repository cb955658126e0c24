"""transformers' side of rotary_test (//rules:references.bzl): LlamaRotaryEmbedding's cos/sin
for each RoPE variant (config.json: its config; arrays.npz: positions, cos, sin), and the
rotate-half reference of testing/references.py on random inputs ("apply_<head>_<rotary>":
x, cos, sin, y)."""

from __future__ import annotations

import json
import os

import numpy as np

DIMS = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=172,
            num_hidden_layers=1, vocab_size=1031)
_SHORT = [float(x) for x in np.linspace(1.0, 2.0, 8)]
_LONG = [float(x) for x in np.linspace(1.0, 8.0, 8)]

# name: (max_position_embeddings, rope_parameters, largest position used)
VARIANTS = {
    "default": (64, {"rope_type": "default", "rope_theta": 10000.0}, 40),
    "linear": (64, {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}, 40),
    "llama3": (64, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                    "rope_theta": 500000.0}, 40),
    "yarn": (64, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
                  "rope_theta": 10000.0}, 40),
    "dynamic_within_base": (64, {"rope_type": "dynamic", "factor": 2.0,
                                 "rope_theta": 10000.0}, 40),
    "dynamic_past_base": (16, {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}, 40),
    "longrope_short": (64, {"rope_type": "longrope", "original_max_position_embeddings": 48,
                            "rope_theta": 10000.0, "short_factor": _SHORT,
                            "long_factor": _LONG}, 40),
    "longrope_long": (64, {"rope_type": "longrope", "original_max_position_embeddings": 16,
                           "rope_theta": 10000.0, "short_factor": _SHORT,
                           "long_factor": _LONG}, 40),
}
#: (head_dim, rotary_dim) of the apply_rotary cases
APPLY = [(16, 16), (16, 8), (32, 16), (16, 4)]


def apply_case(head_dim: int, rotary_dim: int) -> str:
    return f"apply_{head_dim}_{rotary_dim}"


CASES = sorted([*VARIANTS, *(apply_case(*a) for a in APPLY)])


def positions(largest: int) -> np.ndarray:
    """Row 0: up to ``largest``; row 1 left-padded (padding positions are 1, as in generation)."""
    row0 = np.arange(largest - 9, largest + 1)
    row1 = np.concatenate([[1, 1, 1], np.arange(0, 7)])
    return np.stack([row0, row1]).astype(np.int64)


def _variant(case: str, folder: str) -> dict[str, np.ndarray]:
    import torch
    import transformers
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    max_pos, params, largest = VARIANTS[case]
    hf_config = transformers.LlamaConfig(**DIMS, max_position_embeddings=max_pos,
                                         rope_parameters=dict(params))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config.to_dict(), f, indent=1)
    pos = positions(largest)
    with torch.no_grad():
        cos, sin = LlamaRotaryEmbedding(hf_config)(torch.zeros(1), torch.from_numpy(pos))
    return {"positions": pos, "cos": cos.numpy(), "sin": sin.numpy()}


def _apply(head_dim: int, rotary_dim: int) -> dict[str, np.ndarray]:
    import torch

    from testing.references import apply_rotary

    rng = np.random.default_rng(0)
    batch, heads, seq = 2, 3, 5
    x = rng.standard_normal((batch, heads, seq, head_dim)).astype(np.float32)
    angles = rng.uniform(-3, 3, (batch, seq, rotary_dim // 2)).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    y = apply_rotary(torch.from_numpy(x), torch.from_numpy(cos), torch.from_numpy(sin),
                     rotary_dim).numpy()
    return {"x": x, "cos": cos, "sin": sin, "y": y}


def write_case(case: str, folder: str) -> None:
    """A variant: config.json and arrays.npz; an apply case: arrays.npz."""
    from testing import recorded_arrays

    if case in VARIANTS:
        recorded_arrays.save(folder, _variant(case, folder))
    else:
        recorded_arrays.save(folder, _apply(*next(a for a in APPLY if apply_case(*a) == case)))
