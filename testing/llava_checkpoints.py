"""Tiny LLaVA checkpoints written by transformers, made harder to pass by accident.

transformers initializes the multi-modal projector with std 0.02, so on its own
tiny random LLaVA image features would be ~0.01 (far below the text embeddings
they replace). :func:`make_llava_checkpoint` scales the projector so image
features are O(1); make_hf_checkpoint has already randomized every bias.
"""

from __future__ import annotations

import os

import numpy as np

from testing.hf_checkpoints import make_hf_checkpoint
from testing.vlm_runs import hf_greedy


def make_llava_checkpoint(folder: str, seed: int = 0, **overrides) -> str:
    """tiny-llava (+ overrides) saved by transformers, then perturbed in place."""
    from safetensors.numpy import load_file, save_file

    make_hf_checkpoint(folder, "tiny-llava", seed=seed, **overrides)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for name, value in tensors.items():
        if "multi_modal_projector" in name:
            tensors[name] = value * np.float32(8.0)
    save_file(tensors, path, metadata={"format": "pt"})
    return folder


def hf_llava_generate(hf_model, input_ids: np.ndarray, pixel_values: np.ndarray | None,
                      new_tokens: int) -> list[int]:
    """transformers' greedy ``new_tokens`` tokens (exactly that many) for one prompt."""
    import torch

    kwargs = {} if pixel_values is None else {"pixel_values": torch.from_numpy(pixel_values)}
    kwargs.update(input_ids=torch.from_numpy(input_ids),
                  attention_mask=torch.ones(input_ids.shape, dtype=torch.long))
    return hf_greedy(hf_model, kwargs, new_tokens)
