"""Tiny Mistral 3 checkpoints written by transformers, and prompts for them.

transformers initializes the projector's three Linears with std 0.02, so image
features would be ~0.002 next to O(1) text embeddings: they are scaled so the
features are O(1). The Pixtral tower's query/key projections are scaled too, so
that attention, hence the 2-D rotary over patch rows and columns, moves the
features well past the tolerance (make_hf_checkpoint has already randomized
every norm and bias). The tokenizer knows Pixtral's image tokens at the ids the
preset gives them (the vocabulary's last four), as genai's processor looks them up.
"""

from __future__ import annotations

import json
import os

import numpy as np

from mobius.tiny.bases import VOCAB_SIZE
from testing.hf_checkpoints import make_hf_checkpoint
from testing.vlm_runs import hf_greedy

IMG, IMG_BREAK, IMG_END, INST = "[IMG]", "[IMG_BREAK]", "[IMG_END]", "[INST]"
TOKEN_IDS = {IMG: VOCAB_SIZE - 1, IMG_BREAK: VOCAB_SIZE - 2, IMG_END: VOCAB_SIZE - 3,
             INST: VOCAB_SIZE - 4}
#: (height, width) in pixels of the test images: 6 x 10 and 4 x 8 patches of 4 px
SIZES = ((24, 40), (16, 32))


def make_mistral3_checkpoint(folder: str, seed: int = 0, **overrides) -> str:
    """tiny-mistral3 (+ overrides) saved by transformers, then perturbed in place."""
    from safetensors.numpy import load_file, save_file

    make_hf_checkpoint(folder, "tiny-mistral3", seed=seed, **overrides)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for name, value in tensors.items():
        if "multi_modal_projector" in name and not name.endswith("norm.weight"):
            tensors[name] = value * np.float32(6.0)
        elif "vision_tower" in name and ("q_proj" in name or "k_proj" in name):
            tensors[name] = value * np.float32(4.0)
    save_file(tensors, path, metadata={"format": "pt"})
    _add_image_tokens(folder)
    return folder


def _add_image_tokens(folder: str) -> None:
    path = os.path.join(folder, "tokenizer.json")
    with open(path) as f:
        tokenizer = json.load(f)
    for text, index in TOKEN_IDS.items():  # in the model's vocab too, so the ids are kept
        tokenizer["model"]["vocab"][text] = index
        tokenizer["added_tokens"].append({"id": index, "content": text, "single_word": False,
                                          "lstrip": False, "rstrip": False, "normalized": False,
                                          "special": True})
    with open(path, "w") as f:
        json.dump(tokenizer, f)


def merged_grid(config, size) -> tuple[int, int]:
    """(rows, columns) of merged patches of an image of ``size`` (height, width) pixels."""
    side = config.vision_config.patch_size * config.spatial_merge_size
    return size[0] // side, size[1] // side


def image_span(config, size) -> list[int]:
    """The tokens of one image: per row of merged patches, [IMG] per column then
    [IMG_BREAK], the last [IMG_BREAK] being [IMG_END] (transformers' PixtralProcessor)."""
    rows, cols = merged_grid(config, size)
    span = ([TOKEN_IDS[IMG]] * cols + [TOKEN_IDS[IMG_BREAK]]) * rows
    span[-1] = TOKEN_IDS[IMG_END]
    return span


def make_images(config, sizes, rng) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(each image [C, h, w], transformers' zero-padded batch [n, C, H, W], image_sizes [n, 2])."""
    channels = config.vision_config.num_channels
    images = [rng.standard_normal((channels, h, w)).astype(np.float32) for h, w in sizes]
    padded = np.zeros((len(sizes), channels, max(h for h, _ in sizes),
                       max(w for _, w in sizes)), np.float32)
    for i, image in enumerate(images):
        padded[i, :, :image.shape[1], :image.shape[2]] = image
    return images, padded, np.array(sizes, dtype=np.int64).reshape(-1, 2)


def hf_mistral3_generate(hf_model, input_ids: np.ndarray, pixel_values, image_sizes,
                         new_tokens: int) -> list[int]:
    """transformers' greedy ``new_tokens`` tokens (exactly that many) for one prompt."""
    import torch

    kwargs = {}
    if pixel_values is not None:
        kwargs = {"pixel_values": torch.from_numpy(pixel_values),
                  "image_sizes": torch.from_numpy(image_sizes)}
    kwargs.update(input_ids=torch.from_numpy(input_ids),
                  attention_mask=torch.ones(input_ids.shape, dtype=torch.long))
    return hf_greedy(hf_model, kwargs, new_tokens)
