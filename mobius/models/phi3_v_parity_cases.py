"""The torch side of phi3_v_parity_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per case a hub-layout checkpoint (ckpt/) and reference.npz
(testing/vlm_reference.py): the batch, the reference's image features and merged
embeddings, and its logits and greedy tokens over STEPS decode steps
(testing/phi3v_checkpoints.py: CLIPVisionModel + Phi3ForCausalLM, weights remapped).
The "genai" case: genai.npz (hand-made prompts' greedy tokens) and, per
PROCESSOR_PROMPTS run, what genai's own phi3v processor makes of it (on the package built
from ckpt/) with the reference's greedy tokens on those tensors (<run>.npz).
"""

from __future__ import annotations

import os

import numpy as np

STEPS, PAD = 3, 3
NUM_CROPS = 4  # sub-crop slots the pixel batches pad to (genai: 16; fewer keep the tower cheap)
GRIDS = [(1, 2), (2, 2), (1, 1)]  # sub-crop grids (rows, cols) of the batch's images

#: case -> make_phi3v_checkpoint overrides
CASES_CONFIG: dict[str, dict] = {
    "default": {},
    # the tower's last layer (hidden state -1) and exact-GELU tower MLPs
    "layer_idx_last": {"img_processor": {"layer_idx": -1, "clip_config": {
        "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 2, "hidden_act": "gelu"}}},
    # the ~1200-token prompts within original_max_position_embeddings: LongRoPE's short
    # factors (the preset's 512 makes every other case read the long ones)
    "longrope_short_factors": {"original_max_position_embeddings": 2048,
                               "max_position_embeddings": 4096},
    "no_rope_scaling_tied": {"rope_scaling": None, "tie_word_embeddings": True},
}
#: genai_test's prompts (batch 1): images -> their grids; greedy NEW_TOKENS tokens
GENAI_IMAGES = {0: [], 1: [(1, 2)], 2: [(2, 1), (1, 1)]}
NEW_TOKENS = 8
#: genai_test's prompts through genai's own processor: prompt, images (IMAGE_SIZES order)
PROCESSOR_PROMPTS = {"processor-one-image": ("The quick <|image_1|> fox", 1),
                     "processor-two-images": ("<|image_1|> and <|image_2|> jump", 2)}
IMAGE_SIZES = [(700, 500), (300, 460)]  # (width, height) px
PROCESSOR_KEYS = ("input_ids", "pixel_values", "image_sizes", "num_image_tokens")
CASES = [*sorted(CASES_CONFIG), "genai"]


def write_case(case: str, folder: str) -> None:
    from testing.phi3v_checkpoints import load_phi3v, make_phi3v_checkpoint

    # genai's processor makes 16 + 1 crops an image (~1900 tokens): the genai case's context
    # holds two images
    config = CASES_CONFIG.get(case, {"max_position_embeddings": 8192})
    ckpt = make_phi3v_checkpoint(os.path.join(folder, "ckpt"), **config)
    if case == "genai":
        _record_genai(load_phi3v(ckpt), folder)
        _record_processor_runs(load_phi3v(ckpt), ckpt, folder)
        return
    _record(load_phi3v(ckpt), folder)


def genai_prompt(images: int, seed: int = 1):
    """(input_ids [1, n] with image i's tokens -i, pixel_values, image_sizes, token counts)."""
    from testing.phi3v_checkpoints import hd_inputs

    rng = np.random.default_rng(seed + images)
    grids = GENAI_IMAGES[images]
    pixels, sizes, counts = hd_inputs(grids, NUM_CROPS, rng) if grids else (None, None, [])
    row = [int(t) for t in rng.integers(3, 1000, size=3)]
    for i, count in enumerate(counts):
        row += [-(i + 1)] * count + [int(t) for t in rng.integers(3, 1000, size=2)]
    return np.array([row], np.int64), pixels, sizes, np.array(counts, np.int64)


def _record_genai(model, folder):
    """genai.npz: each GENAI_IMAGES prompt and the reference's NEW_TOKENS greedy tokens."""
    from testing import vlm_reference
    from testing.parity import position_ids_for

    arrays = {}
    for images in GENAI_IMAGES:
        input_ids, pixels, sizes, counts = genai_prompt(images)
        mask = np.ones_like(input_ids)
        prefill = {"input_ids": input_ids, "position_ids": position_ids_for(mask, mask.shape[1])}
        if images:
            prefill.update(pixel_values=pixels, image_sizes=sizes)
        _, tokens = vlm_reference.greedy(model, prefill, mask, NEW_TOKENS,
                                         lambda step, m: position_ids_for(m, 1))
        arrays[f"tokens.{images}"] = np.concatenate(tokens, axis=1)[0]
    np.savez(os.path.join(folder, "genai.npz"), **arrays)


def image_batch(seed: int = 0):
    """Row 0 holds images 1 and 2, row 1 image 3 (its own id -1), left-padded by PAD."""
    from testing.phi3v_checkpoints import hd_inputs

    rng = np.random.default_rng(seed)
    pixels, sizes, counts = hd_inputs(GRIDS, NUM_CROPS, rng)
    text = lambda n: [int(t) for t in rng.integers(3, 1000, size=n)]  # noqa: E731
    row0 = text(2) + [-1] * counts[0] + text(1) + [-2] * counts[1] + text(2)
    row1 = [0] * PAD + text(2) + [-1] * counts[2] + text(len(row0) - PAD - 2 - counts[2])
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :PAD] = 0
    return input_ids, attention_mask, pixels, sizes


def _record(model, folder):
    import torch

    from testing import vlm_reference
    from testing.parity import position_ids_for

    input_ids, attention_mask, pixels, sizes = image_batch()
    with torch.no_grad():
        features = model.image_features(torch.from_numpy(pixels), torch.from_numpy(sizes))
        merged = model.embeddings(torch.from_numpy(input_ids), torch.from_numpy(pixels),
                                  torch.from_numpy(sizes))
    prefill = {"input_ids": input_ids, "pixel_values": pixels, "image_sizes": sizes,
               "position_ids": position_ids_for(attention_mask, input_ids.shape[1])}
    logits, tokens = vlm_reference.greedy(model, prefill, attention_mask, STEPS,
                                          lambda step, mask: position_ids_for(mask, 1))
    arrays = {"input_ids": input_ids, "attention_mask": attention_mask, "pixels": pixels,
              "sizes": sizes, "features": features.numpy(), "merged": merged.numpy()}
    vlm_reference.save(os.path.join(folder, "reference.npz"), arrays, logits, tokens)


def write_images(folder: str) -> list[str]:
    """The genai test's PNG images (the second dark: far from the first's noise)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i, (width, height) in enumerate(IMAGE_SIZES):
        paths.append(os.path.join(folder, f"image{i}.png"))
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels // 8 if i else pixels).save(paths[-1])
    return paths


def processor_inputs(processor, run: str, images: list[str]):
    import onnxruntime_genai as og

    prompt, count = PROCESSOR_PROMPTS[run]
    return processor(prompt, images=og.Images.open(*images[:count]))


def _record_processor_runs(model, ckpt, folder):
    """<run>.npz: what genai's phi3v processor makes of each PROCESSOR_PROMPTS prompt (on
    the package built from ckpt/, cpu) and the reference's greedy tokens on those tensors."""
    import tempfile

    import mobius
    from testing import vlm_reference, vlm_runs
    from testing.parity import position_ids_for

    with tempfile.TemporaryDirectory() as tmp:
        path = mobius.build(ckpt, execution_provider="cpu", dtype="f32").save(
            os.path.join(tmp, "pkg"))
        processor = vlm_runs.genai_model(path).create_multimodal_processor()
        images = write_images(tmp)
        for run in PROCESSOR_PROMPTS:
            inputs = processor_inputs(processor, run, images)
            arrays = {k: inputs[k].as_numpy() for k in PROCESSOR_KEYS}
            input_ids = arrays["input_ids"].astype(np.int64)
            mask = np.ones_like(input_ids)
            prefill = {"input_ids": input_ids, "pixel_values": arrays["pixel_values"],
                       "image_sizes": arrays["image_sizes"].astype(np.int64),
                       "position_ids": position_ids_for(mask, mask.shape[1])}
            _, tokens = vlm_reference.greedy(model, prefill, mask, NEW_TOKENS,
                                             lambda step, m: position_ids_for(m, 1))
            np.savez(os.path.join(folder, f"{run}.npz"),
                     tokens=np.concatenate(tokens, axis=1)[0], **arrays)
