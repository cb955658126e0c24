"""Tiny Qwen2.5-VL / Qwen3-VL checkpoints written by transformers, and prompts for them.

transformers initializes the patch mergers with std 0.02, so random image
features would be ~0.01 next to O(1) text embeddings: the merger is scaled so
they are O(1), and the decoder's query/key projections are scaled so that
attention (hence the 3-D positions) moves the logits well past the tolerance
(make_hf_checkpoint has already randomized every bias and norm).
A prompt holds, per image, ``vision_start_token_id`` then its image tokens
(onnxruntime-genai finds images by that token), pixel_values are random
flattened patches and ``mm_token_type_ids`` marks the image tokens (what
transformers' processor gives its 3-D position computation).
"""

from __future__ import annotations

import os

import numpy as np

from testing.hf_checkpoints import make_hf_checkpoint
from testing.vlm_runs import hf_greedy

#: (frames, rows, columns) in patches: 3 x 5 merged tokens, windows of 2 x 2 cut ragged
GRID = (1, 6, 10)


def make_qwen2_5_vl_checkpoint(folder: str, seed: int = 0, preset: str = "tiny-qwen2_5_vl",
                               **overrides) -> str:
    """``preset`` (+ overrides) saved by transformers, then perturbed in place."""
    from safetensors.numpy import load_file, save_file

    make_hf_checkpoint(folder, preset, seed=seed, **overrides)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for name, value in tensors.items():
        if "merger.mlp" in name or ("merger" in name and "linear_fc" in name):
            tensors[name] = value * np.float32(6.0)
        elif "self_attn.q_proj.weight" in name or "self_attn.k_proj.weight" in name:
            tensors[name] = value * np.float32(4.0)  # sharper attention: positions matter more
    save_file(tensors, path, metadata={"format": "pt"})
    return folder


def image_tokens(config, grid=GRID) -> int:
    merge = config.vision_config.spatial_merge_size
    return grid[0] * (grid[1] // merge) * (grid[2] // merge)


def make_pixels(config, grids, rng) -> tuple[np.ndarray, np.ndarray]:
    """pixel_values [sum of t * h * w, patch_dim] and image_grid_thw [images, 3]."""
    vision = config.vision_config
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    patches = sum(int(np.prod(grid)) for grid in grids)
    pixels = rng.standard_normal((patches, patch_dim)).astype(np.float32)
    return pixels, np.array(grids, dtype=np.int64).reshape(-1, 3)


def image_span(config, grid=GRID) -> list[int]:
    """<|vision_start|> (where the config has one: EXAONE 4.5 has not) + the image tokens
    of one image."""
    start = getattr(config, "vision_start_token_id", None)
    return [start] * (start is not None) + [config.image_token_id] * image_tokens(config, grid)


def first_special_token(config) -> int:
    """The lowest of the config's image / video / vision-start token ids (text stays below)."""
    keys = ("vision_start_token_id", "image_token_id", "video_token_id")
    return min(getattr(config, key) for key in keys if getattr(config, key, None) is not None)


def hf_qwen_generate(hf_model, input_ids: np.ndarray, pixel_values, image_grid_thw,
                     new_tokens: int) -> list[int]:
    """transformers' greedy ``new_tokens`` tokens (exactly that many) for one prompt."""
    import torch

    ids = torch.from_numpy(input_ids)
    kwargs = {"mm_token_type_ids": (ids == hf_model.config.image_token_id).int()}
    if pixel_values is not None:
        kwargs.update(pixel_values=torch.from_numpy(pixel_values),
                      image_grid_thw=torch.from_numpy(image_grid_thw))
    kwargs.update(input_ids=ids, attention_mask=torch.ones_like(ids))
    return hf_greedy(hf_model, kwargs, new_tokens)
