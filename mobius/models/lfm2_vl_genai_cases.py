"""transformers' side of lfm2_vl_genai_test (the reference_cases rule runs it at build time,
//rules:references.bzl). "tiny-lfm2-vl": the checkpoint (ckpt/; untied, seed 3: a
checkpoint whose greedy tokens the image steers, a tied tiny head echoing the last prompt
token whatever the image) and per prompt what transformers' Lfm2VlProcessor makes of it
with transformers' greedy tokens on that, and on the negated pixels (<prompt>.npz).
"plain": the seed-0 checkpoint the preprocessor tests copy and edit.
"""

from __future__ import annotations

import json
import os

import numpy as np

NEW_TOKENS = 8
SIDE = 64  # 16 x 16 patches of 4 px: 64 tokens, the processor's minimum (no resize)
PROMPTS = {"one-image": ("The quick <image> brown fox", 1),
           "two-images": ("<image> and <image> jump", 2)}
CASES = ["plain", "tiny-lfm2-vl"]


def write_images(folder: str) -> list[str]:
    """The prompts' two SIDE x SIDE PNG images."""
    from PIL import Image

    rng = np.random.default_rng(0)
    images = [os.path.join(folder, f"image{i}.png") for i in range(2)]
    for image in images:
        Image.fromarray(rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)).save(image)
    return images


def write_case(case: str, folder: str) -> None:
    import tempfile

    from testing import vlm_runs
    from testing.hf_checkpoints import load_hf_model
    from testing.lfm2_vl_checkpoints import add_image_tokens, make_lfm2_vl_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    if case == "plain":
        make_lfm2_vl_checkpoint(ckpt)
        return
    make_lfm2_vl_checkpoint(ckpt, seed=3, tie_word_embeddings=False)
    with open(os.path.join(ckpt, "config.json")) as f:
        add_image_tokens(ckpt, json.load(f)["image_token_id"])
    hf_model = load_hf_model(ckpt)
    with tempfile.TemporaryDirectory() as tmp:
        images = write_images(tmp)
        for name, (prompt, count) in PROMPTS.items():
            inputs = _hf_inputs(ckpt, prompt, images[:count], hf_model.config)
            other = dict(inputs, pixel_values=-inputs["pixel_values"])
            np.savez(os.path.join(folder, f"{name}.npz"), **inputs,
                     tokens=vlm_runs.hf_greedy(hf_model, inputs, NEW_TOKENS),
                     negated_tokens=vlm_runs.hf_greedy(hf_model, other, NEW_TOKENS),
                     image_token_id=hf_model.config.image_token_id)


def _hf_inputs(folder: str, prompt: str, images: list[str], config) -> dict:
    """What transformers' Lfm2VlProcessor makes of the prompt and images, one tile each, no
    resize (its image processor needs torchvision, not a dependency here): ``<image>``
    expanded as Lfm2VlProcessor does (image start, a token per 2 x 2 patch block, image
    end) through the checkpoint's tokenizer; the 1/255-scaled, 0.5-normalized image cut as
    its ``convert_image_to_patches`` cuts it (row-major patches, each (y, x, channel)),
    padded to max_image_tokens * downsample_factor^2 patches, with the patch mask and
    the grid."""
    from PIL import Image
    from transformers import AutoTokenizer

    from testing.lfm2_vl_checkpoints import END, IMAGE, START

    patch, factor = config.vision_config.patch_size, config.downsample_factor
    grid = SIDE // patch
    span = START + IMAGE * ((grid // factor) ** 2) + END
    tokenizer = AutoTokenizer.from_pretrained(folder)
    input_ids = tokenizer(prompt.replace(IMAGE, span), add_special_tokens=False,
                          return_tensors="np")["input_ids"]
    most = 256 * factor**2
    padded = np.zeros((len(images), most, 3 * patch**2), np.float32)
    mask = np.zeros((len(images), most), np.int64)
    for i, image in enumerate(images):
        pixels = (np.asarray(Image.open(image).convert("RGB"), np.float32) / 255 - 0.5) / 0.5
        patches = pixels.reshape(grid, patch, grid, patch, 3).transpose(0, 2, 1, 3, 4)
        padded[i, :grid * grid] = patches.reshape(grid * grid, -1)
        mask[i, :grid * grid] = 1
    return {"input_ids": input_ids.astype(np.int64), "attention_mask": np.ones_like(input_ids),
            "pixel_values": padded, "pixel_attention_mask": mask,
            "spatial_shapes": np.array([[grid, grid]] * len(images), np.int64)}
