"""transformers' side of gemma4_unified_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a tiny-gemma4-unified checkpoint written by
transformers with every parameter random (layer_scalar too), two images' merged patches
as its processor lays them out (row-major (x, y) positions, the smaller image padded with
(-1, -1)), and transformers' run (testing/vlm_reference.py): image features, merged
embeddings, prefill logits and STEPS greedy steps.
"""

from __future__ import annotations

import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS

PRESET = "tiny-gemma4-unified"
STEPS, PAD = 2, 3
#: two images' grids of model patches (columns, rows)
GRIDS = ((3, 2), (2, 2))
_MM = TINY_PRESETS[PRESET]


def _text(**edits) -> dict:
    return {"text_config": {**_MM["text_config"], **edits}}


#: case: config.json overrides of the preset, each a switch the family reads
OVERRIDES: dict[str, dict] = {
    "default": {},  # bidirectional image spans, 2 x 2 merges
    "causal": _text(use_bidirectional_attention=None),
    "pool3": {"vision_config": {**_MM["vision_config"], "pooling_kernel_size": 3}},
    # the decoder's switches the preset sets, off: V projected, no KV sharing, no cap
    "plain": _text(attention_k_eq_v=False, num_kv_shared_layers=0, use_double_wide_mlp=False,
                   final_logit_softcapping=None),
}
#: the genai test's checkpoint: genai case -> its base case; GENAI_SEED's prompt has a
#: varied greedy continuation (no eos)
GENAI = {"genai": "default"}
GENAI_SEED, NEW_TOKENS = 5, 8
CASES = [*sorted(OVERRIDES), *sorted(GENAI)]


def _random_layer_scalars(ckpt: str) -> None:
    """layer_scalar (transformers starts it at 1) made random around 1."""
    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(ckpt, "model.safetensors")
    tensors = load_file(path)
    gen = torch.Generator().manual_seed(11)
    for name in sorted(tensors):
        if name.endswith(".layer_scalar"):
            tensors[name] = 1 + 0.2 * torch.randn(tensors[name].shape, generator=gen)
    save_file(tensors, path, metadata={"format": "pt"})


def _patches(config, rng) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """pixel_values [2, most patches, 3 * model_patch^2] in [0, 1], positions, counts."""
    vision = config.vision_config
    width = 3 * (vision.patch_size * vision.pooling_kernel_size) ** 2
    most = max(c * r for c, r in GRIDS)
    pixels = rng.random((len(GRIDS), most, width), dtype=np.float32)
    positions = np.full((len(GRIDS), most, 2), -1, np.int64)
    for i, (columns, rows) in enumerate(GRIDS):
        grid = [(x, y) for y in range(rows) for x in range(columns)]
        positions[i, :len(grid)] = grid
        pixels[i, len(grid):] = 0.0
    return pixels, positions, [c * r for c, r in GRIDS]


def _inputs(config, seed: int) -> dict:
    """Row 0: text, image 0, text; row 1 (left-padded by PAD): text, image 1, text."""
    rng = np.random.default_rng(seed)
    pixels, positions, counts = _patches(config, rng)
    image = config.image_token_id
    text = lambda n: [int(t) for t in rng.integers(4, image - 8, size=n)]  # noqa: E731
    span = lambda n: [config.boi_token_id, *[image] * n, config.eoi_token_id]  # noqa: E731
    row0 = text(2) + span(counts[0]) + text(3)
    row1 = text(1) + span(counts[1])
    row1 = [0] * PAD + row1 + text(len(row0) - PAD - len(row1))
    input_ids = np.array([row0, row1], dtype=np.int64)
    mask = np.ones_like(input_ids)
    mask[1, :PAD] = 0
    return {"input_ids": input_ids, "attention_mask": mask, "pixel_values": pixels,
            "image_position_ids": positions,
            "mm_token_type_ids": (input_ids == image).astype(np.int64)}


def _record(hf_model, path: str) -> None:
    import torch

    from testing import vlm_reference

    inputs = _inputs(hf_model.config, 0)
    with torch.no_grad():
        features = torch.cat(hf_model.model.get_image_features(
            torch.from_numpy(inputs["pixel_values"]),
            torch.from_numpy(inputs["image_position_ids"])).pooler_output)
    vlm_reference.record_image_run(
        hf_model, inputs, ("pixel_values", "image_position_ids", "mm_token_type_ids"),
        features, STEPS, path, image_token_id=hf_model.config.image_token_id)


def _record_genai(hf_model, path: str) -> None:
    """Row 0 of GENAI_SEED's batch (one image, its real patches) and its greedy tokens."""
    from testing import vlm_reference

    inputs = _inputs(hf_model.config, GENAI_SEED)
    ids = inputs["input_ids"][:1]
    count = int((ids == hf_model.config.image_token_id).sum())
    prefill = {"input_ids": ids, "pixel_values": inputs["pixel_values"][:1, :count],
               "image_position_ids": inputs["image_position_ids"][:1, :count],
               "mm_token_type_ids": inputs["mm_token_type_ids"][:1]}
    _, tokens = vlm_reference.greedy(hf_model, prefill, np.ones_like(ids), NEW_TOKENS)
    np.savez(path, **prefill, count=count, tokens=np.concatenate(tokens, axis=1))


def write_case(case: str, folder: str) -> None:
    """ckpt/ and run.npz (GENAI cases: ckpt/ and genai.npz)."""
    from testing.hf_checkpoints import load_hf_model
    from testing.random_checkpoint import random_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    random_checkpoint(ckpt, PRESET, **OVERRIDES[GENAI.get(case, case)])
    _random_layer_scalars(ckpt)
    if case in GENAI:
        _record_genai(load_hf_model(ckpt), os.path.join(folder, "genai.npz"))
        return
    _record(load_hf_model(ckpt), os.path.join(folder, "run.npz"))
