"""An encoder-decoder's transformers run as its cases module records it (text2text and
Whisper parity): encoder states, cross K/V, and per step the logits, the self-attention
cache and the greedy token, as named arrays of one .npz."""

from __future__ import annotations

import numpy as np


def unpack(reference: dict[str, np.ndarray], layers: int, steps: int):
    """(encoder states, cross K/V per layer, logits per step, self K/V per step and layer,
    the tokens transformers chose) of a recording with ``steps`` decode steps."""
    kv = range(2 * layers)
    return (reference["states"], [reference[f"cross_{n}"] for n in kv],
            [reference[f"logits_{s}"] for s in range(steps + 1)],
            [[reference[f"self_{s}_{n}"] for n in kv] for s in range(steps + 1)],
            [reference[f"token_{s}"] for s in range(steps)])
