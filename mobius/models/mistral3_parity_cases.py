"""transformers' side of mistral3_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a checkpoint (ckpt/) and transformers' run on the
test's batch (seed0_pad3.npz, testing/vlm_reference.py). "default" adds the cpu test's
batches (seed 1: unpadded with STEPS steps, left-padded prefill only) and odd_grid.npz
(a 5 x 9-patch image and transformers' features for it); "hub_no_tie_key" is the default
checkpoint with config.json as transformers 4.x saved it (no tie_word_embeddings).
"""

from __future__ import annotations

import json
import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_reference

STEPS, PAD = 3, 3
_LLAMA_TEXT = {**TINY_PRESETS["tiny-mistral3"]["text_config"], "model_type": "llama"}
_VISION = TINY_PRESETS["tiny-mistral3"]["vision_config"]

#: name: tiny-mistral3 overrides (each changes the output where the default would not)
OVERRIDES = {
    "default": {},  # merge 2, last hidden state, GELU, no projector bias, untied head
    "no_merge": {"spatial_merge_size": 1},
    "projector_bias": {"multimodal_projector_bias": True},
    "first_layer_state": {"vision_feature_layer": [-2]},  # the state after layer 0 of 2
    "silu_projector": {"projector_hidden_act": "silu"},
    "tied": {"tie_word_embeddings": True},  # the head reads the token embedding
    "llama_text_silu_tower": {"text_config": _LLAMA_TEXT,
                              "vision_config": {**_VISION, "hidden_act": "silu"}},
    "sliding_window": {"text_config": {**TINY_PRESETS["tiny-mistral3"]["text_config"],
                                       "sliding_window": 8}},  # Mistral's, on a 23-token prompt
    "tower_rope_theta": {"vision_config": {**_VISION, "rope_parameters": {
        "rope_type": "axial", "rope_theta": 100.0}}},
}
#: the cpu test's (seed, pad, decode steps) runs on the default checkpoint
CPU_RUNS = ((1, 0, STEPS), (1, PAD, 0))
ODD_SIZE, ODD_SEED = (20, 36), 5
CASES = [*sorted(OVERRIDES), "hub_no_tie_key"]



def write_case(case: str, folder: str) -> None:
    from testing.hf_checkpoints import load_hf_model
    from testing.mistral3_checkpoints import make_mistral3_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    make_mistral3_checkpoint(ckpt, **OVERRIDES.get(case, {}))
    if case == "hub_no_tie_key":
        _drop_tie_key(ckpt)
    hf_model = load_hf_model(ckpt)
    steps = 1 if case == "hub_no_tie_key" else STEPS
    _record(hf_model, 0, PAD, steps, vlm_reference.run_path(folder, 0, PAD))
    if case == "default":
        for seed, pad, steps in CPU_RUNS:
            _record(hf_model, seed, pad, steps, vlm_reference.run_path(folder, seed, pad))
        _odd_grid(hf_model, os.path.join(folder, "odd_grid.npz"))


def _drop_tie_key(ckpt):
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    config.pop("tie_word_embeddings")
    config["text_config"].pop("tie_word_embeddings", None)
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(config, f)


def _inputs(config, seed, pad) -> dict:
    """Row 0: text, a 24 x 40 image, text; row 1 (left-padded by ``pad``): a 16 x 32 image;
    "image.<i>": each image at its own size, "pixel_values": zero-padded to the largest."""
    from testing.mistral3_checkpoints import SIZES, TOKEN_IDS, image_span, make_images

    rng = np.random.default_rng(seed)
    first_image_token = min(TOKEN_IDS.values())
    text = lambda n: [int(t) for t in rng.integers(4, first_image_token, size=n)]  # noqa: E731
    span0, span1 = image_span(config, SIZES[0]), image_span(config, SIZES[1])
    row0 = text(2) + span0 + text(3)
    rest = len(row0) - pad - len(span1) - 1
    row1 = [0] * pad + text(1) + span1 + text(rest)
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    images, padded, sizes = make_images(config, SIZES, rng)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "pixel_values": padded,
            "image_sizes": sizes, **{f"image.{i}": image for i, image in enumerate(images)}}


def _features(hf_model, pixels, sizes):
    import torch

    with torch.no_grad():
        return torch.cat(list(hf_model.model.get_image_features(
            pixel_values=torch.from_numpy(pixels), image_sizes=torch.from_numpy(sizes))
            .pooler_output))


def _record(hf_model, seed, pad, steps, path):
    """The batch, transformers' features, merged embeddings, logits and greedy tokens."""
    inputs = _inputs(hf_model.config, seed, pad)
    inputs["tie_word_embeddings"] = np.bool_(hf_model.config.tie_word_embeddings)
    features = _features(hf_model, inputs["pixel_values"], inputs["image_sizes"])
    vlm_reference.record_image_run(hf_model, inputs, ("pixel_values", "image_sizes"), features,
                                   steps, path)


def _odd_grid(hf_model, path):
    from testing.mistral3_checkpoints import make_images

    images, padded, sizes = make_images(hf_model.config, [ODD_SIZE],
                                        np.random.default_rng(ODD_SEED))
    np.savez(path, image=images[0], features=_features(hf_model, padded, sizes).numpy())
