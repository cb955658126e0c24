"""transformers' side of llava_genai_test (the reference_cases rule runs it at build time,
//rules:references.bzl): the tiny-llava checkpoint (ckpt/) and, per prompt of 0, 1 and 2
images, the prompt, its pixels and transformers' greedy tokens (prompts.npz,
transformers.json).
"""

from __future__ import annotations

import json
import os

import numpy as np

NEW_TOKENS = 8
IMAGES = (0, 1, 2)
CASES = ["tiny-llava"]


def write_case(case: str, folder: str) -> None:
    from testing.hf_checkpoints import load_hf_model
    from testing.llava_checkpoints import hf_llava_generate, make_llava_checkpoint

    hf_model = load_hf_model(make_llava_checkpoint(os.path.join(folder, "ckpt")))
    arrays, rows = {}, {}
    for images in IMAGES:
        input_ids, pixels = _prompt(hf_model.config, images)
        arrays[f"input_ids.{images}"], arrays[f"pixel_values.{images}"] = input_ids, pixels
        rows[str(images)] = hf_llava_generate(hf_model, input_ids, pixels if images else None,
                                              NEW_TOKENS)
    np.savez(os.path.join(folder, "prompts.npz"), **arrays)
    with open(os.path.join(folder, "transformers.json"), "w") as f:
        json.dump({"tokens": rows, "image_token_index": hf_model.config.image_token_index}, f)


def _prompt(config, images: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """input_ids [1, n] with ``images`` runs of image tokens, and their pixel_values."""
    vision = config.vision_config
    per_image = (vision.image_size // vision.patch_size) ** 2
    rng = np.random.default_rng(seed)
    ids = [int(t) for t in rng.integers(4, config.image_token_index, size=2)]
    for _ in range(images):
        ids += [config.image_token_index] * per_image
        ids += [int(t) for t in rng.integers(4, config.image_token_index, size=3)]
    pixels = rng.standard_normal((images, vision.num_channels, vision.image_size,
                                  vision.image_size)).astype(np.float32)
    return np.array([ids], dtype=np.int64), pixels
