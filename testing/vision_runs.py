"""The "image_pass" reference runner (Task.reference.runner): one forward of a batch
of images (and, for zero-shot, label prompts) through an image package and through
the task's transformers auto class, compared on every output the package has.

``record`` runs transformers (torch) on the batch the family's graph takes, and ``save`` /
``load`` keep it as an .npz, so that a test compares against outputs recorded at build
time (the reference_cases rule, //rules:references.bzl) without importing torch.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from testing import parity


@dataclasses.dataclass
class ImageRun:
    diffs: dict  # output name -> max |onnx - reference|
    onnx: dict
    reference: dict
    feeds: dict


@dataclasses.dataclass(frozen=True)
class ImageReference:
    feeds: dict  # image_feeds for the family's graph
    outputs: dict  # output name -> transformers' float32 output on them


def image_feeds(inputs: dict, config, images: int = 2, texts: int = 3, seq: int = 7,
                seed: int = 0) -> dict[str, np.ndarray]:
    """For the graph inputs ``inputs`` (name -> shape), random pixel_values for the graph's
    image size; for zero-shot graphs also
    ``texts`` prompts of ``seq`` tokens. Graphs with an attention_mask (CLIP): the
    last row right-padded by 2, each row's eos token just before its padding (CLIP
    pools at the first eos)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    if "pixel_values" in inputs:
        shape = [images, *inputs["pixel_values"][1:]]
        feeds["pixel_values"] = rng.standard_normal(shape).astype(np.float32)
    names = set(inputs)
    if "input_ids" in names:
        text = config.raw.get("text_config") or {}
        eos, pad = text.get("eos_token_id"), text.get("pad_token_id") or 0
        ids = rng.integers(4, config.vocab_size, size=(texts, seq), dtype=np.int64)
        mask = np.ones((texts, seq), np.int64)
        if "attention_mask" in names:  # CLIP
            mask[-1, seq - 2:] = 0
            ids[-1, seq - 2:] = pad
            ids[np.arange(texts), mask.sum(1) - 1] = eos
            feeds["attention_mask"] = mask
        feeds["input_ids"] = ids
    return feeds


def run_onnx(session, feeds: dict, dtype) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    feeds = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in feeds.items()}
    return {n: np.asarray(v).astype(np.float32)
            for n, v in zip(names, parity.run_session(session, feeds))}


def run_reference(folder: str, feeds: dict) -> dict[str, np.ndarray]:
    """Every tensor output of the task's transformers auto class on ``feeds``."""
    import torch

    from testing.hf_checkpoints import load_hf_model

    tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
    with torch.no_grad():
        out = load_hf_model(folder)(**tensors)
    return {name: value.float().numpy() for name, value in out.items()
            if isinstance(value, torch.Tensor)}


def record(folder: str, family, seed: int = 0) -> ImageReference:
    """transformers' outputs on image_feeds for the inputs of ``family``'s graph (its
    module's contract) for the checkpoint's config."""
    import onnx_ir

    from mobius.context import build_context

    with open(os.path.join(folder, "config.json")) as f:
        config = family.make_config(json.load(f))
    with build_context(None, onnx_ir.DataType.FLOAT):
        module = family.module(config)
    feeds = image_feeds({spec.name: spec.dims for spec in module.inputs}, config, seed=seed)
    return ImageReference(feeds, run_reference(folder, feeds))


def save(reference: ImageReference, path: str) -> str:
    arrays = {f"feed:{k}": v for k, v in reference.feeds.items()}
    arrays.update({f"output:{k}": v for k, v in reference.outputs.items()})
    np.savez(path, **arrays)
    return path


def load(path: str) -> ImageReference:
    parts = {"feed": {}, "output": {}}
    with np.load(path) as data:
        for key in data.files:
            part, name = key.split(":", 1)
            parts[part][name] = data[key]
    return ImageReference(parts["feed"], parts["output"])


def image_parity(session, reference: ImageReference, config, np_dtype=np.float32,
                 seed: int = 0) -> ImageRun:
    """The package's outputs on the recorded batch (which must be image_feeds for this
    graph and ``config``), each against transformers' output on it."""
    feeds = image_feeds({i.name: i.shape for i in session.get_inputs()}, config, seed=seed)
    assert set(feeds) == set(reference.feeds), (set(feeds), set(reference.feeds))
    for name, value in feeds.items():
        np.testing.assert_array_equal(reference.feeds[name], value, err_msg=name)
    onnx_out = run_onnx(session, feeds, np_dtype)
    diffs = {}
    for name, value in onnx_out.items():
        ref = reference.outputs[name]
        assert value.shape == ref.shape, (name, value.shape, ref.shape)
        diffs[name] = float(np.abs(value - ref).max())
    return ImageRun(diffs, onnx_out, {n: reference.outputs[n] for n in onnx_out}, feeds)
