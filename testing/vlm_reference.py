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

from testing import parity


@dataclasses.dataclass(frozen=True)
class VlmReference:
    arrays: dict[str, np.ndarray]  # the batch fed to both sides, and transformers' outputs
    logits: list[np.ndarray]  # prefill [batch, seq, vocab], then [batch, 1, vocab] a step
    tokens: list[np.ndarray]  # transformers' greedy tokens, each [batch, 1]

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


def greedy(hf_model, prefill: dict, attention_mask: np.ndarray, steps: int,
           positions=None, tokens=None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(per-step logits, tokens) of transformers: ``hf_model(**prefill)`` (numpy arrays,
    ``attention_mask`` added), then ``steps`` steps with its cache on its own greedy token
    (or on ``tokens`` where given); ``positions(step, mask)`` gives a step's position_ids
    (numpy), None: none passed."""
    import inspect

    import torch

    params = inspect.signature(hf_model.forward).parameters
    cache_kwarg = "cache" if "cache" in params else "past_key_values"
    forced = tokens
    mask = torch.from_numpy(attention_mask)
    feeds = {k: torch.from_numpy(v) for k, v in prefill.items()}
    logits, tokens, cache = [], [], None
    with torch.no_grad():
        for step in range(steps + 1):
            if cache is not None:
                feeds[cache_kwarg] = cache
            out = hf_model(**feeds, attention_mask=mask, use_cache=True)
            cache = getattr(out, "cache", None)
            cache = out.past_key_values if cache is None else cache
            logits.append(out.logits.float().numpy())
            if step == steps:
                break
            token = (logits[-1][:, -1].argmax(-1)[:, None].astype(np.int64) if forced is None
                     else forced[step])
            tokens.append(token)
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
            feeds = {"input_ids": torch.from_numpy(token)}
            if positions is not None:
                feeds["position_ids"] = torch.from_numpy(positions(step, mask.numpy()))
    return logits, tokens


def record_image_run(hf_model, inputs: dict, media: tuple, features, steps: int, path: str,
                     image_token_id: int | None = None,
                     **extra) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Saves ``inputs`` (input_ids, attention_mask, the ``media`` keys transformers takes,
    anything else the test feeds), transformers' image ``features`` (a tensor), its merge
    of them into the token embeddings ("merged": at the model's placeholder mask, or at the
    ``image_token_id`` tokens) and its run (position ids over the mask; ``extra``: more
    prefill feeds); returns (logits, greedy tokens)."""
    import torch

    with torch.no_grad():
        ids = torch.from_numpy(inputs["input_ids"])
        embeds = hf_model.get_input_embeddings()(ids)
        if image_token_id is None:
            placeholder = hf_model.model.get_placeholder_mask(ids, inputs_embeds=embeds,
                                                              image_features=features)
        else:  # Gemma 4's get_placeholder_mask reads no features and returns three masks
            placeholder = (ids == image_token_id)[..., None].expand_as(embeds)
        merged = embeds.masked_scatter(placeholder, features)
    mask = inputs["attention_mask"]
    positions = inputs.get("position_ids")  # the test's own, else numbered over the mask
    prefill = {"input_ids": inputs["input_ids"], **{k: inputs[k] for k in media},
               "position_ids": parity.position_ids_for(mask, mask.shape[1])
               if positions is None else positions, **extra}
    logits, tokens = greedy(hf_model, prefill, mask, steps,
                            lambda step, m: parity.position_ids_for(m, 1))
    save(path, {**inputs, "features": features.numpy(), "merged": merged.numpy()}, logits,
         tokens)
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


def save_processed(processor, pixels: np.ndarray, folder: str, keys: tuple[str, ...]) -> None:
    """<folder>/processor.npz: ``keys`` of what transformers' image ``processor`` makes of
    ``pixels`` saved as a PNG and read back (as the genai tests hand genai the image)."""
    import os

    from PIL import Image

    path = os.path.join(folder, "image.png")
    Image.fromarray(pixels).save(path)
    out = processor(images=Image.open(path), return_tensors="np")
    os.remove(path)
    np.savez(os.path.join(folder, "processor.npz"), **{key: out[key] for key in keys})


def run_path(folder: str, seed: int, pad: int) -> str:
    """Where a VLM cases module records its run on the (seed, pad) batch."""
    import os

    return os.path.join(folder, f"seed{seed}_pad{pad}.npz")


def load_case(folder: str, seed: int, pad: int) -> tuple[str, VlmReference]:
    """(checkpoint folder, recorded run on the (seed, pad) batch) of a VLM case folder
    (<folder>/ckpt beside run_path's recordings)."""
    import os

    return os.path.join(folder, "ckpt"), load(run_path(folder, seed, pad))
