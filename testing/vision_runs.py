"""The "image_pass" reference runner (Task.reference.runner): one forward of a batch
of images (and, for zero-shot, label prompts) through an image package and through
the task's transformers auto class, compared on every output the package has."""

from __future__ import annotations

import dataclasses

import numpy as np

from testing import parity


@dataclasses.dataclass
class ImageRun:
    diffs: dict  # output name -> max |onnx - reference|
    onnx: dict
    reference: dict
    feeds: dict


def image_feeds(session, config, images: int = 2, texts: int = 3, seq: int = 7,
                seed: int = 0) -> dict[str, np.ndarray]:
    """Random pixel_values for the graph's image size; for zero-shot graphs also
    ``texts`` prompts of ``seq`` tokens. Graphs with an attention_mask (CLIP): the
    last row right-padded by 2, each row's eos token just before its padding (CLIP
    pools at the first eos)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in session.get_inputs():
        if value.name == "pixel_values":
            shape = [images, *value.shape[1:]]
            feeds["pixel_values"] = rng.standard_normal(shape).astype(np.float32)
    names = {v.name for v in session.get_inputs()}
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


def run_reference(folder: str, feeds: dict, names) -> dict[str, np.ndarray]:
    import torch

    from testing.hf_checkpoints import load_hf_model

    tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
    with torch.no_grad():
        out = load_hf_model(folder)(**tensors)
    return {name: getattr(out, name).float().numpy() for name in names}


def image_parity(session, folder: str, config, np_dtype=np.float32, seed: int = 0) -> ImageRun:
    feeds = image_feeds(session, config, seed=seed)
    onnx_out = run_onnx(session, feeds, np_dtype)
    reference = run_reference(folder, feeds, list(onnx_out))
    diffs = {}
    for name, value in onnx_out.items():
        assert value.shape == reference[name].shape, (name, value.shape, reference[name].shape)
        diffs[name] = float(np.abs(value - reference[name]).max())
    return ImageRun(diffs, onnx_out, reference, feeds)
