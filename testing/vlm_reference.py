"""transformers' side of a vision-language parity run, recorded once and replayed.

A VLM parity test feeds one batch (token ids, mask, image / audio tensors) to transformers
and to the package chained as onnxruntime-genai runs it (testing/vlm_sessions.py), then
compares features, merged embeddings and the logits of the prefill and each greedy step.
``greedy`` records transformers' run (torch) at build time (a cases module,
//rules:references.bzl); ``save`` / ``load`` keep the inputs and outputs as one .npz, and
the test replays transformers' greedy tokens into the package (``Sessions.greedy(tokens=)``)
without importing torch.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class VlmReference:
    arrays: dict[str, np.ndarray]  # the batch fed to both sides, and transformers' outputs
    logits: list[np.ndarray]  # prefill [batch, seq, vocab], then [batch, 1, vocab] a step
    tokens: list[np.ndarray]  # transformers' greedy tokens, each [batch, 1]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


def greedy(hf_model, prefill: dict, attention_mask: np.ndarray, steps: int,
           positions=None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(per-step logits, greedy tokens) of transformers: ``hf_model(**prefill)`` (numpy
    arrays, ``attention_mask`` added), then ``steps`` steps on its own greedy token with its
    cache; ``positions(step, mask)`` gives a step's position_ids (numpy), None: none passed."""
    import torch

    mask = torch.from_numpy(attention_mask)
    feeds = {k: torch.from_numpy(v) for k, v in prefill.items()}
    logits, tokens, cache = [], [], None
    with torch.no_grad():
        for step in range(steps + 1):
            if cache is not None:
                feeds["cache"] = cache
            out = hf_model(**feeds, attention_mask=mask, use_cache=True)
            cache = getattr(out, "cache", None)
            cache = out.past_key_values if cache is None else cache
            logits.append(out.logits.float().numpy())
            if step == steps:
                break
            token = logits[-1][:, -1].argmax(-1)[:, None].astype(np.int64)
            tokens.append(token)
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
            feeds = {"input_ids": torch.from_numpy(token)}
            if positions is not None:
                feeds["position_ids"] = torch.from_numpy(positions(step, mask.numpy()))
    return logits, tokens


def save(path: str, arrays: dict, logits: list, tokens: list) -> str:
    named = {f"array.{k}": np.asarray(v) for k, v in arrays.items()}
    named.update({f"logits.{i}": x for i, x in enumerate(logits)})
    named.update({f"token.{i}": t for i, t in enumerate(tokens)})
    np.savez(path, **named)
    return path


def load(path: str) -> VlmReference:
    with np.load(path) as data:
        arrays = {n.split(".", 1)[1]: data[n] for n in data.files if n.startswith("array.")}
        steps = sum(1 for n in data.files if n.startswith("token."))
        return VlmReference(arrays, [data[f"logits.{i}"] for i in range(steps + 1)],
                            [data[f"token.{i}"] for i in range(steps)])
