"""The Qwen2.5-VL / Qwen3-VL parity harness: a saved three-model package run
as onnxruntime-genai chains it, and transformers' reference for the same inputs.

One batch of 2 prompts with one 6 x 10-patch image each (row 1 left-padded)
runs vision -> embedding -> decoder, then decode steps feeding the greedy
token (or transformers' recorded one) through the embedding model (zero image
features) and present.* back as past_key_values.*. ``record`` runs transformers
at build time (a cases module, //rules:references.bzl) into a
testing/vlm_reference.py recording that holds the batch too. The prefill's 3-D
position ids are transformers' own (``get_rope_index``; EXAONE 4.5, which has none:
[batch, seq] positions numbered over the mask, given to transformers too); each decode
step continues every stream at the row's last position + 1. Qwen3-VL's image_features /
inputs_embeds carry its deepstack features beside the embeddings
(mobius/models/qwen3_vl.py): the reference lays transformers' out the same way.
"""

from __future__ import annotations

import os

import numpy as np

from mobius.builder import build
from testing import vlm_reference
from testing.parity import position_ids_for
from testing.qwen2_5_vl_checkpoints import (GRID, first_special_token, image_span,
                                             make_pixels)
from testing.vlm_sessions import StatefulSessions

STEPS, PAD = 3, 3


class Package(StatefulSessions):
    """The saved package's three onnxruntime sessions (Qwen 3.5's decoder state: its
    DeltaNet layers' conv and recurrent states beside the attention layers' KV caches)."""

    def __init__(self, path: str, package):
        super().__init__(path, package.config)
        self.package = package
        self.width = self.embedding.get_inputs()[1].shape[-1]  # image_features' last dim

    def no_features(self):
        return np.zeros((0, self.width), np.float32)

    def image_features(self, pixel_values, image_grid_thw):
        return self.vision.run(None, {"pixel_values": pixel_values,
                                      "image_grid_thw": image_grid_thw})[0]

    def generate(self, inputs, steps=STEPS, tokens=None):
        """(image_features, prefill inputs_embeds, per-step logits, tokens): the decode
        steps on the greedy tokens, or on ``tokens`` (transformers') where given."""
        features = self.image_features(inputs["pixel_values"], inputs["image_grid_thw"])
        embeds = self.embed(inputs["input_ids"], features)
        return (features, embeds, *self.greedy(inputs["input_ids"], embeds,
                                               inputs["attention_mask"], steps,
                                               inputs["position_ids"], tokens))

    def replay(self, ref: vlm_reference.VlmReference):
        """generate on a recording's batch, its decode steps on transformers' tokens."""
        return self.generate(ref, len(ref.tokens), ref.tokens)


def decode_positions(prefill_positions: np.ndarray, step: int) -> np.ndarray:
    """[3, batch, 1] ([batch, 1] for 1-D positions): every stream continues at the row's
    last prefill position + 1 + step (the last prompt token is text, so its three streams
    agree)."""
    return prefill_positions[..., -1:] + 1 + step


def build_and_load(folder, out_dir, ep="default") -> Package:
    package = build(folder, execution_provider=ep, dtype="f32")
    return Package(package.save(str(out_dir), overwrite=True), package)


def make_inputs(hf_model, seed=0, pad=PAD) -> dict:
    """Two prompts with one image each (row 1 left-padded by ``pad`` <= 3), their
    patches and grids, and transformers' 3-D position ids for them (1-D over the mask
    where the model has no ``get_rope_index``)."""
    import torch

    config = hf_model.config
    rng = np.random.default_rng(seed)
    top = first_special_token(config) - 1

    def text(n):
        return [int(t) for t in rng.integers(4, top, size=n)]

    row0 = text(2) + image_span(config) + text(3)
    row1 = [0] * pad + text(1) + image_span(config) + text(4 - pad)
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    pixel_values, grid = make_pixels(config, [GRID, GRID], rng)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask,
              "pixel_values": pixel_values, "image_grid_thw": grid}
    if not hasattr(hf_model.model, "get_rope_index"):
        return {**inputs, "position_ids": position_ids_for(attention_mask, input_ids.shape[1])}
    with torch.no_grad():
        ids = torch.from_numpy(input_ids)
        positions, _ = hf_model.model.get_rope_index(
            ids, (ids == config.image_token_id).int(), torch.from_numpy(grid),
            attention_mask=torch.from_numpy(attention_mask))
    return {**inputs, "position_ids": positions.numpy().astype(np.int64)}


def _hf_features(hf_model, ids, pixels, grid):
    """(image features [tokens, hidden * (1 + D)], merged inputs_embeds of the same width)."""
    import torch

    out = hf_model.model.get_image_features(pixels, grid)
    parts = [torch.cat(list(out.pooler_output))]
    parts += [torch.cat(list(f)) for f in getattr(out, "deepstack_features", None) or []]
    embeds = hf_model.get_input_embeddings()(ids)
    placeholder, _ = hf_model.model.get_placeholder_mask(ids, inputs_embeds=embeds,
                                                         image_features=parts[0])
    merged = [embeds.masked_scatter(placeholder, parts[0])]
    merged += [torch.zeros_like(embeds).masked_scatter(placeholder, f) for f in parts[1:]]
    return torch.cat(parts, -1), torch.cat(merged, -1)


def write_case(folder: str, make, runs=((0, PAD),)) -> None:
    """A cases module's case: ckpt/ (``make(ckpt folder)`` writes it) and, per (seed, pad)
    of ``runs``, transformers' run on make_inputs(seed, pad) (``load_case`` reads it)."""
    from testing.hf_checkpoints import load_hf_model

    checkpoint = os.path.join(folder, "ckpt")
    make(checkpoint)
    hf_model = load_hf_model(checkpoint)
    for seed, pad in runs:
        record(hf_model, make_inputs(hf_model, seed, pad),
               vlm_reference.run_path(folder, seed, pad))


def load_case(folder: str, seed=0, pad=PAD) -> tuple[str, vlm_reference.VlmReference]:
    """(checkpoint folder, recorded run) that ``write_case`` left in ``folder``."""
    return vlm_reference.load_case(folder, seed, pad)


def record(hf_model, inputs, path: str, steps=STEPS) -> str:
    """Saves the batch, transformers' image features ("features"), merged embeddings
    ("merged"), per-step logits and greedy tokens to ``path`` (testing/vlm_reference.py)."""
    import torch

    with torch.no_grad():
        features, merged = _hf_features(
            hf_model, torch.from_numpy(inputs["input_ids"]),
            torch.from_numpy(inputs["pixel_values"]), torch.from_numpy(inputs["image_grid_thw"]))
    ids = inputs["input_ids"]
    prefill = {"input_ids": ids, "pixel_values": inputs["pixel_values"],
               "image_grid_thw": inputs["image_grid_thw"]}
    if inputs["position_ids"].ndim == 2:  # 1-D positions (EXAONE 4.5): given as fed to us
        prefill["position_ids"] = inputs["position_ids"]
    else:  # transformers computes the 3-D ones from the image tokens' types
        prefill["mm_token_type_ids"] = (ids == hf_model.config.image_token_id).astype(np.int32)
    logits, tokens = vlm_reference.greedy(
        hf_model, prefill, inputs["attention_mask"], steps,
        lambda step, _: decode_positions(inputs["position_ids"], step))
    arrays = {**inputs, "features": features.numpy(), "merged": merged.numpy()}
    return vlm_reference.save(path, arrays, logits, tokens)
