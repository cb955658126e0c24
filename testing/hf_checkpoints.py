"""Tiny random checkpoints written by transformers itself (from_config + save_pretrained).

Parity tests use these rather than mobius' own numpy generator, so that the
weight names, layouts and config spellings are exactly what transformers
produces for the family. A model_type transformers has no class for (a hub checkpoint
that ships auto_map code, such as InternLM2) is written by mobius' numpy writer instead,
under the hub's tensor names, every tensor random.
"""

from __future__ import annotations

import json
import os

from mobius.models.registry import family_for
from mobius.tiny.checkpoint import real_folder, write_random_checkpoint, write_tiny_preprocessors
from mobius.tiny.presets import TINY_PRESETS


def prebuilt_hf_checkpoint(preset: str) -> str | None:
    """The Bazel-built transformers checkpoint of ``preset`` (//testing/tiny:hf in the test's
    data, found under ``$MOBIUS_TINY_DIR/hf``): seed 0, no overrides; None when absent."""
    root = os.environ.get("MOBIUS_TINY_DIR")
    folder = os.path.join(root, "hf", preset) if root else None
    return real_folder(folder, "config.json")


def seed0_checkpoint(folder: str, preset: str) -> str:
    """``preset``'s seed-0 transformers checkpoint, to read only: the Bazel-built one when
    the test has //testing/tiny:hf in its data (no torch import, nothing written), else
    make_hf_checkpoint(folder, preset) (the same bytes)."""
    return prebuilt_hf_checkpoint(preset) or make_hf_checkpoint(folder, preset)


def make_hf_checkpoint(folder: str, preset: str, seed: int = 0, **overrides) -> str:
    """Saves a random transformers model for ``preset`` (+ overrides) into ``folder``,
    as the auto class of its family's task (``Task.reference.auto_class``) makes it."""
    import torch
    import transformers

    raw = {**TINY_PRESETS[preset], **overrides}
    if raw.get("model_type") not in transformers.CONFIG_MAPPING:
        # hub checkpoints with auto_map code (InternLM2): no transformers class writes them,
        # so mobius' numpy writer does, under the hub's tensor names (every tensor random)
        os.makedirs(folder, exist_ok=True)
        write_random_checkpoint(raw, folder, seed)
        return folder
    config = transformers.AutoConfig.for_model(**raw)
    torch.manual_seed(seed)
    model = _auto_class(raw).from_config(config, dtype=torch.float32)
    randomize_parameters(model, seed)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    write_tiny_preprocessors(folder, raw)
    return folder


def _auto_class(raw: dict):
    """The transformers auto class the family's task compares against, or
    AutoModelForCausalLM where that one has no entry for the config (transformers
    files Phi4MultimodalForCausalLM, a vision-language model, as a causal LM)."""
    import transformers

    auto = getattr(transformers, family_for(raw).task.reference.auto_class)
    model_type = raw.get("model_type")
    if (model_type in transformers.CONFIG_MAPPING
            and transformers.CONFIG_MAPPING[model_type] not in auto._model_mapping):
        return transformers.AutoModelForCausalLM
    return auto


def randomize_parameters(model, seed: int) -> None:
    """Gives every parameter that transformers initializes to a constant a random value.

    transformers starts biases at 0 and norm scales at 1 (0 for offset norms), so
    a model that dropped its biases or a norm would still match on its own tiny
    checkpoint. Each constant parameter ``c`` becomes ``c + 0.1 * N(0, 1)``: norm
    scales stay around 1, biases around 0. Parameters already random are kept.
    """
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, param in model.named_parameters():
            if param.numel() and bool((param == param.reshape(-1)[0]).all()):
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
    """transformers' model of the checkpoint ``folder``: for a model_type transformers has no
    class for, its nearest native model with the weights remapped
    (testing/remapped_references.py)."""
    import torch
    import transformers

    raw = read_config(folder)
    if raw.get("model_type") not in transformers.CONFIG_MAPPING:
        from testing.remapped_references import REFERENCES

        return REFERENCES[raw.get("model_type") or raw["architectures"][0]](folder)
    model = _auto_class(raw).from_pretrained(folder, dtype=torch.float32)
    model.eval()
    return model


def read_config(folder: str) -> dict:
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)


def untie_t5_head(folder: str, seed: int = 5) -> str:
    """Gives a transformers-5-written T5 / mT5 checkpoint its own random ``lm_head.weight``
    and ``tie_word_embeddings: false``: the layout of the flan-t5 / mT5 hub checkpoints,
    which transformers 5 (it always ties T5 on save) does not write itself."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    rng = np.random.default_rng(seed)
    tensors["lm_head.weight"] = (0.5 * rng.standard_normal(tensors["shared.weight"].shape)
                                 ).astype(np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    raw = read_config(folder)
    raw.pop("scale_decoder_outputs", None)
    raw["tie_word_embeddings"] = False
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
    return folder


def renamed_checkpoint(folder: str, out: str, rename, saved_prefix: str | None = None) -> str:
    """A copy of ``folder`` at ``out`` whose model.safetensors names go through ``rename``
    (another release's spelling of the same weights). ``saved_prefix``: a prefix some saved
    name must have, the layout ``rename`` assumes."""
    import shutil

    from safetensors.numpy import load_file, save_file

    shutil.copytree(folder, out, copy_function=shutil.copyfile)  # case folders are read-only
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    if saved_prefix is not None:
        assert any(k.startswith(saved_prefix) for k in tensors), saved_prefix
    save_file({rename(k): v for k, v in tensors.items()}, os.path.join(out, "model.safetensors"),
              metadata={"format": "pt"})
    return out
