"""Writes a built-in tiny random checkpoint (config, weights, tokenizer) with numpy only."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

import numpy as np
import onnx_ir as ir

from mobius.components.layer_norm import LayerNorm
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.context import build_context
from mobius.errors import MobiusError
from mobius.models.registry import family_for
from mobius.tiny.presets import TINY_PRESETS
from mobius.tiny.tokenizer import write_tiny_tokenizer
from mobius.weights.safetensors_writer import write_safetensors

_FORMAT_VERSION = 2  # bump when the generation changes, to refresh caches


def tiny_cache_dir() -> str:
    root = (os.environ.get("MOBIUS_CACHE")
            or os.path.join(os.path.expanduser("~"), ".cache", "mobius"))
    return os.path.join(root, "tiny")


def prebuilt_tiny_checkpoint(name: str, seed: int = 0) -> str | None:
    """The Bazel-built copy of ``name`` (a ``tiny_checkpoint`` target in the test's data),
    found under ``$MOBIUS_TINY_DIR/<name>``; None when there is none."""
    root = os.environ.get("MOBIUS_TINY_DIR")
    folder = os.path.join(root, name) if root and seed == 0 else None
    return real_folder(folder, "model.safetensors")


def real_folder(folder: str | None, marker: str) -> str | None:
    """The folder whose files ``folder`` holds, or None without ``marker`` in it.

    Bazel's runfiles tree links each file of a built folder into the output
    tree; mobius refuses checkpoint files that are links leaving their folder,
    so callers get the output-tree folder itself."""
    if not folder or not os.path.isfile(os.path.join(folder, marker)):
        return None
    return os.path.dirname(os.path.realpath(os.path.join(folder, marker)))


def make_tiny_checkpoint(name: str, folder: str | None = None, seed: int = 0) -> str:
    """Returns a folder holding the tiny checkpoint ``name``, creating it if needed.

    Without ``folder``: a prebuilt copy (see prebuilt_tiny_checkpoint) if there is one,
    else the per-user cache (``$MOBIUS_CACHE``; the Bazel test runner points it into
    ``$TEST_TMPDIR``)."""
    preset_config(name)  # unknown names fail before any lookup
    if folder is None and (prebuilt := prebuilt_tiny_checkpoint(name, seed)):
        return prebuilt
    folder = folder or os.path.join(tiny_cache_dir(), cache_entry(name, seed))
    if os.path.isfile(os.path.join(folder, "model.safetensors")):
        return folder
    os.makedirs(os.path.dirname(os.path.abspath(folder)), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".tiny-", dir=os.path.dirname(os.path.abspath(folder)))
    try:
        write_tiny_checkpoint(name, staging, seed)
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def cache_entry(name: str, seed: int) -> str:
    """The cache folder's name: the preset's config.json and the tensors its family reads
    in it, so a cached checkpoint is never reused once either changes (an edited preset,
    or a mobius whose module reads a new tensor: its build would fail on the old files)."""
    raw = preset_config(name)
    key = json.dumps([raw, layout(raw)], sort_keys=True).encode()
    digest = hashlib.sha256(key).hexdigest()[:12]
    return f"{name}-v{_FORMAT_VERSION}-{digest}-seed{seed}"


def write_tiny_checkpoint(name: str, folder: str, seed: int = 0) -> None:
    """Writes the files of the tiny checkpoint ``name`` into the existing folder ``folder``.

    Not atomic: make_tiny_checkpoint stages it; a Bazel action writes its own
    output directory directly (Bazel discards the outputs of a failed action)."""
    write_random_checkpoint(preset_config(name), folder, seed)


def write_random_checkpoint(raw: dict, folder: str, seed: int = 0) -> None:
    """config.json ``raw`` and random weights under the names the family's module reads
    (a checkpoint's own layout), with its tokenizer / processor files, into ``folder``."""
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
    text = raw.get("text_config") or raw  # multi-modal presets nest the decoder's config
    if "eos_token_id" in text:  # generative models
        with open(os.path.join(folder, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": text.get("bos_token_id"),
                       "eos_token_id": text["eos_token_id"], "do_sample": False}, f, indent=2)
    write_safetensors(os.path.join(folder, "model.safetensors"), random_weights(raw, seed))
    write_tiny_preprocessors(folder, raw)


def preset_config(name: str) -> dict:
    """A copy of the preset's config.json dict; MobiusError for an unknown name."""
    if name not in TINY_PRESETS:
        raise MobiusError(f"unknown tiny model {name!r}; "
                          f"built-in: {', '.join(sorted(TINY_PRESETS))}")
    return dict(TINY_PRESETS[name])


def write_tiny_preprocessors(folder: str, raw: dict) -> None:
    """The tokenizer of a model with text, the image processor of an image model
    (the family's default for its image size: mobius/tasks/image_processor.py), or the
    task's own files where it writes them (a CTC character vocabulary and
    feature-extractor config)."""
    family = family_for(raw)
    if family.task.write_tiny_processor is not None:
        family.task.write_tiny_processor(folder, raw)
        return
    text = raw.get("text_config") or raw
    if "vocab_size" not in text and family.normalize_raw is not None:
        text = family.normalize_raw(text)  # a foreign spelling (ChatGLM's padded_vocab_size)
    if "vocab_size" in text:
        write_tiny_tokenizer(folder, text["vocab_size"])
    if family.task.processor_files is not None:
        with build_context(None, ir.DataType.FLOAT):
            module = family.module(family.make_config(raw))
        with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
            json.dump(module.image_processor(), f, indent=2)


def random_weights(raw: dict, seed: int) -> dict[str, np.ndarray]:
    """Random float32 tensors for every checkpoint tensor the family's module reads:
    norm scales around 1, everything else (biases included) around 0."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for source, shape, is_scale in _draws(raw):
        noise = rng.standard_normal(shape)
        tensors[source] = ((1.0 + 0.1 * noise) if is_scale else 0.05 * noise).astype(np.float32)
    return tensors


def layout(raw: dict) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor the checkpoint of ``raw`` holds, sorted: what the
    family's module reads today."""
    return sorted({source: tuple(shape) for source, shape, _ in _draws(raw)}.items())


def _draws(raw: dict) -> list[tuple[str, tuple[int, ...], bool]]:
    """(tensor, shape, is a norm scale) in the order random_weights draws them (a
    fused tensor's sources first, as each parameter spells them)."""
    family = family_for(raw)
    with build_context(None, ir.DataType.FLOAT):
        module = family.module(family.make_config(raw))
    scales = {id(m.weight) for m in module.modules() if isinstance(m, (LayerNorm, RMSNorm))}
    draws, seen = [], set()
    for name, param in module.named_parameters():
        if isinstance(param, Weight) and param.sources is not None:  # first spelling
            module_name = name.rpartition(".")[0]
            for source, shape in zip(param.sources.spellings[0], param.sources.shapes):
                source = f"{module_name}.{source}" if module_name else source
                draws.append((source, shape, False))
                seen.add(source)
            continue
        source = param.checkpoint_name or name if isinstance(param, Weight) else None
        if source is None or source in seen:
            continue
        draws.append((source, param.checkpoint_shape, id(param) in scales))
        seen.add(source)
    return draws
