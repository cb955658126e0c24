"""Tiny random checkpoints written by transformers itself (from_config + save_pretrained).

Parity tests use these rather than mobius' own numpy generator, so that the
weight names, layouts and config spellings are exactly what transformers
produces for the family.
"""

from __future__ import annotations

import json
import os

from mobius.tiny.presets import TINY_PRESETS
from mobius.tiny.tokenizer import write_tiny_tokenizer


def make_hf_checkpoint(folder: str, preset: str, seed: int = 0, **overrides) -> str:
    """Saves a random transformers model for ``preset`` (+ overrides) into ``folder``."""
    import torch
    import transformers

    raw = {**TINY_PRESETS[preset], **overrides}
    config = transformers.AutoConfig.for_model(**raw)
    torch.manual_seed(seed)
    model = _auto_class(config).from_config(config, dtype=torch.float32)
    _randomize_norms(model, seed)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    write_tiny_tokenizer(folder, (raw.get("text_config") or raw)["vocab_size"])
    return folder


def _auto_class(config):
    """AutoModelForCausalLM, or the image-text-to-text class for vision-language configs,
    or the speech seq2seq class (Whisper: WhisperForConditionalGeneration)."""
    import transformers

    if getattr(config, "vision_config", None) is not None:
        return transformers.AutoModelForImageTextToText
    if type(config) in transformers.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING:
        return transformers.AutoModelForSpeechSeq2Seq
    return transformers.AutoModelForCausalLM


def _randomize_norms(model, seed: int) -> None:
    """Norm weights start at exactly 1 (or 0); perturb them so a dropped norm is caught."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.add_(0.1 * torch.randn(param.shape, generator=generator))


def randomize_zero_tensors(folder: str, seed: int = 0) -> str:
    """Fills every all-zero float tensor of ``folder``'s safetensors (the biases
    transformers initializes to 0) with N(0, 0.1), so a dropped bias is caught."""
    import glob

    import numpy as np
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(seed + 2)
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        tensors = load_file(path)
        for name, array in tensors.items():
            if array.dtype.kind == "f" and array.size and not array.any():
                tensors[name] = (0.1 * rng.standard_normal(array.shape)).astype(array.dtype)
        save_file(tensors, path, metadata={"format": "pt"})
    return folder


def load_hf_model(folder: str):
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    model = _auto_class(config).from_pretrained(folder, dtype=torch.float32)
    model.eval()
    return model


def read_config(folder: str) -> dict:
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)
