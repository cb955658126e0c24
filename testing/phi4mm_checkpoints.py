"""Tiny Phi-4-multimodal checkpoints and the HD-crop inputs genai's phi4mm processor
makes (crops, canvas sizes, patch masks), written by hand so every case is exact."""

from __future__ import annotations

import numpy as np

from testing.hf_checkpoints import randomize_parameters

CROP, SIDE, BASE = 448, 32, 16  # px per crop, patches per crop side, pooled tokens per side


def make_phi4mm_checkpoint(folder: str, seed: int = 0, vision: dict | None = None,
                           **overrides) -> str:
    """tiny-phi4mm (+ overrides, + vision_config overrides) saved by transformers,
    every parameter random."""
    import torch
    import transformers

    from mobius.tiny.presets import TINY_PRESETS

    raw = {**TINY_PRESETS["tiny-phi4mm"], **overrides}
    raw["vision_config"] = {**raw["vision_config"], **(vision or {})}
    config = transformers.AutoConfig.for_model(**raw)
    torch.manual_seed(seed)
    model = transformers.Phi4MultimodalForCausalLM(config)
    randomize_parameters(model, seed)
    model.eval().save_pretrained(folder, safe_serialization=True)
    return folder


def load_phi4mm(folder: str):
    """transformers' model with eager attention: its sdpa path makes the vision tower
    causal whenever no patch is padded (the tower is bidirectional)."""
    import torch
    import transformers

    model = transformers.Phi4MultimodalForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def image_mask(rows: int, cols: int, pad_rows: int = 0, pad_cols: int = 0) -> np.ndarray:
    """[1 + rows * cols, SIDE, SIDE]: the global crop's full mask, then the sub-crops'
    (row-major) with the canvas's last ``pad_rows`` / ``pad_cols`` patches padding."""
    canvas = np.ones((rows * SIDE, cols * SIDE), np.float32)
    if pad_rows:
        canvas[-pad_rows:] = 0
    if pad_cols:
        canvas[:, -pad_cols:] = 0
    crops = canvas.reshape(rows, SIDE, cols, SIDE).transpose(0, 2, 1, 3).reshape(-1, SIDE, SIDE)
    return np.concatenate([np.ones((1, SIDE, SIDE), np.float32), crops])


def token_count(mask: np.ndarray, cols: int) -> int:
    """The image's tokens as genai's processor counts them (sub grid rows x (cols + 1),
    1 separator, BASE rows of BASE + 1 global tokens)."""
    sub = mask[1:, ::2, ::2]
    rows = int(sub[::cols, :, 0].sum())
    width = int(sub[:cols, 0, :].sum())
    return rows * (width + 1) + 1 + BASE * (BASE + 1)


def hd_inputs(grids, rng):
    """pixel_values [images, crops, 3, CROP, CROP], image_sizes, image_attention_mask
    (zero-padded to the largest crop count) and each image's token count, for
    ``grids`` = [(rows, cols, pad_rows, pad_cols), ...]."""
    masks = [image_mask(*grid) for grid in grids]
    crops = max(len(m) for m in masks)
    pixels = np.zeros((len(grids), crops, 3, CROP, CROP), np.float32)
    mask = np.zeros((len(grids), crops, SIDE, SIDE), np.float32)
    for i, m in enumerate(masks):
        pixels[i, :len(m)] = rng.standard_normal((len(m), 3, CROP, CROP))
        mask[i, :len(m)] = m
    sizes = np.array([[rows * CROP, cols * CROP] for rows, cols, _, _ in grids], np.int64)
    counts = [token_count(m, grid[1]) for m, grid in zip(masks, grids)]
    return pixels, sizes, mask, counts
