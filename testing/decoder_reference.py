"""transformers' logits for a decoder's standard parity run, recorded once and replayed.

The run: a batch of two prompts (row 1 left-padded, testing/parity.make_batch), a prefill,
then ``steps`` cached decode steps on transformers' own greedy tokens. ``record`` computes
it with a transformers model (torch); ``save`` / ``load`` keep it as an .npz, so that a
parity test compares its ONNX package against stored logits without importing torch
(the reference_cases rule, //rules:references.bzl, writes them at build time).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from testing import parity


@dataclasses.dataclass(frozen=True)
class DecoderReference:
    input_ids: np.ndarray  # [2, prompt_len] (row 1 left-padded)
    attention_mask: np.ndarray  # the prefill mask
    tokens: list[np.ndarray]  # the decode tokens, each [2, 1]: transformers' greedy choices
    logits: list[np.ndarray]  # float32: prefill [2, prompt_len, vocab], then [2, 1, vocab] a step

    def first(self, steps: int) -> DecoderReference:
        """The same run cut after ``steps`` decode steps."""
        return dataclasses.replace(self, tokens=self.tokens[:steps],
                                   logits=self.logits[:steps + 1])


def record(hf_model, vocab_size: int, *, prompt_len: int = 10, steps: int = 3, pad: int = 3,
           seed: int = 0) -> DecoderReference:
    """transformers' run on make_batch(vocab_size, prompt_len, pad, seed): prefill, then
    ``steps`` greedy steps with its KV cache."""
    import torch

    input_ids, attention_mask = parity.make_batch(vocab_size, prompt_len, pad, seed)
    mask = torch.from_numpy(attention_mask)
    feeds = {"input_ids": torch.from_numpy(input_ids)}
    logits, tokens, cache = [], [], None
    with torch.no_grad():
        for step in range(steps + 1):
            positions = parity.position_ids_for(mask.numpy(), feeds["input_ids"].shape[1])
            out = hf_model(**feeds, attention_mask=mask, position_ids=torch.from_numpy(positions),
                           cache=cache, use_cache=True)
            cache = out.past_key_values
            logits.append(out.logits.float().numpy())
            if step == steps:
                break
            token = logits[-1][:, -1].argmax(-1)[:, None].astype(np.int64)
            tokens.append(token)
            feeds = {"input_ids": torch.from_numpy(token)}
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
    return DecoderReference(input_ids, attention_mask, tokens, logits)


def save(reference: DecoderReference, path: str) -> str:
    arrays = {"input_ids": reference.input_ids, "attention_mask": reference.attention_mask}
    arrays.update({f"token_{i}": t for i, t in enumerate(reference.tokens)})
    arrays.update({f"logits_{i}": x for i, x in enumerate(reference.logits)})
    np.savez(path, **arrays)
    return path


def load(path: str) -> DecoderReference:
    with np.load(path) as data:
        steps = sum(1 for name in data.files if name.startswith("token_"))
        return DecoderReference(data["input_ids"], data["attention_mask"],
                                [data[f"token_{i}"] for i in range(steps)],
                                [data[f"logits_{i}"] for i in range(steps + 1)])
