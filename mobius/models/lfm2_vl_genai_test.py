"""L4 (e2e): onnxruntime-genai runs the mobius LFM2-VL package as its own ``lfm2_vl``
type, with its own processor, and generates what transformers generates.

genai's lfm2_vl processor resizes the image (sides a multiple of patch *
downsample_factor, 64..256 tokens), cuts it into patches padded to
``max_num_patches``, and expands ``<image>`` in the prompt into ``<|image_start|>`` +
one ``<image>`` per token + ``<|image_end|>``, as transformers' Lfm2VlProcessor does
for one tile. Checked: genai's processor gives what transformers' processor gives
(``_hf_inputs``: input_ids, patches, patch mask, spatial shapes; the PNG already has a
valid size, so no resize interpolates), and genai's greedy tokens (processor in, ``Generator.set_inputs``: vision -> embedding ->
decoder with the conv states carried) equal transformers' ``generate``, with one image
and with two. (genai 0.18's processor batches the images of one prompt only when they
resize to one size: two sizes stop it with "image_sizes reports ... larger than the
... pixel_values batch"; the vision model itself takes mixed sizes, see
lfm2_vl_parity_test.py.)
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from testing import vlm_runs
from testing.hf_checkpoints import load_hf_model
from testing.lfm2_vl_checkpoints import (END, IMAGE, START, add_image_tokens,
                                         make_lfm2_vl_checkpoint)

NEW_TOKENS = 8
SIDE = 64  # 16 x 16 patches of 4 px: 64 tokens, the processor's minimum (no resize)
PROMPTS = {"one-image": ("The quick <image> brown fox", 1),
           "two-images": ("<image> and <image> jump", 2)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, checkpoint folder, transformers model, image paths)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("lfm2_vl")
    # untied, seed 3: a checkpoint whose greedy tokens the image steers (a tied tiny head
    # echoes the last prompt token whatever the image)
    folder = make_lfm2_vl_checkpoint(str(root / "ckpt"), seed=3, tie_word_embeddings=False)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    add_image_tokens(folder, config["image_token_id"])
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(root / "pkg"))
    rng = np.random.default_rng(0)
    images = [str(root / f"image{i}.png") for i in range(2)]
    for image in images:
        Image.fromarray(rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)).save(image)
    return path, folder, load_hf_model(folder), images


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


def _hf_generate(hf_model, inputs) -> list[int]:
    names = ("input_ids", "attention_mask", "pixel_values", "pixel_attention_mask",
             "spatial_shapes")
    return vlm_runs.hf_greedy(hf_model, {k: np.asarray(inputs[k]) for k in names}, NEW_TOKENS)


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_genai_processor_and_generation_match_transformers(built, case):
    path, folder, hf_model, image_paths = built
    prompt, count = PROMPTS[case]
    model = og.Model(path)
    inputs = model.create_multimodal_processor()(prompt,
                                                 images=og.Images.open(*image_paths[:count]))
    expected = _hf_inputs(folder, prompt, image_paths[:count], hf_model.config)

    input_ids = inputs["input_ids"].as_numpy().astype(np.int64)
    np.testing.assert_array_equal(input_ids, expected["input_ids"])
    assert int((input_ids == hf_model.config.image_token_id).sum()) == count * (SIDE // 8) ** 2
    np.testing.assert_array_equal(inputs["image_sizes"].as_numpy(), expected["spatial_shapes"])
    mask = inputs["image_attention_mask"].as_numpy()
    np.testing.assert_array_equal(mask, expected["pixel_attention_mask"])
    pixels = inputs["pixel_values"].as_numpy()
    assert pixels.shape == expected["pixel_values"].shape
    assert float(np.abs(pixels - expected["pixel_values"]).max()) <= 1e-6

    tokens = vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)
    assert tokens == _hf_generate(hf_model, expected)
    other = dict(expected, pixel_values=-expected["pixel_values"])  # the image steers them
    assert tokens != _hf_generate(hf_model, other)


def test_checkpoint_preprocessor_settings_reach_genai(tmp_path):
    """A checkpoint's own image token bounds and mean/std (not the family's 64..256, 0.5)
    are in the package's processor_config.json and genai_config, and genai's processor
    then normalizes and pads as transformers' does with them (the 64 x 64 image's 64
    tokens lie within 16..100: no resize)."""
    from PIL import Image

    mean, std = [0.4, 0.5, 0.6], [0.2, 0.3, 0.25]
    folder = make_lfm2_vl_checkpoint(str(tmp_path / "ckpt"))
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Lfm2VlImageProcessorFast", "min_image_tokens": 16,
                   "max_image_tokens": 100, "image_mean": mean, "image_std": std}, f)
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(tmp_path / "pkg"))
    with open(os.path.join(path, "processor_config.json")) as f:
        steps = {t["operation"]["name"]: t["operation"].get("attrs")
                 for t in json.load(f)["processor"]["transforms"]}
    patches = 4 * 4 * 2 * 2  # pixels per image token: (patch 4 * downsample 2)^2
    assert (steps["resize"]["min_pixels"], steps["resize"]["max_pixels"]) == (
        16 * patches, 100 * patches)
    assert (steps["normalize"]["mean"], steps["normalize"]["std"]) == (mean, std)
    with open(os.path.join(path, "genai_config.json")) as f:
        assert json.load(f)["model"]["vision"]["max_num_patches"] == 400
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
    Image.fromarray(image).save(str(tmp_path / "image.png"))
    inputs = og.Model(path).create_multimodal_processor()(
        "<image>", images=og.Images.open(str(tmp_path / "image.png")))
    grid = SIDE // 4
    expected = np.zeros((1, 400, 48), np.float32)  # padded to max_image_tokens * 2^2 patches
    cut = ((image / np.float32(255) - mean) / std).astype(np.float32)
    expected[0, :grid * grid] = cut.reshape(grid, 4, grid, 4, 3).transpose(0, 2, 1, 3, 4).reshape(
        grid * grid, -1)
    np.testing.assert_allclose(inputs["pixel_values"].as_numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("preprocessor, match", [
    ({"min_image_tokens": 300}, "min_image_tokens 300 exceeds max_image_tokens 256"),
    ({"encoder_patch_size": 16}, "encoder_patch_size=16 is not supported"),
    ({"downsample_factor": 4}, "downsample_factor=4"),
    ({"resample": 3}, "resample=3"),
    ({"max_image_tokens": 1.5}, "max_image_tokens must be a positive integer"),
])
def test_processor_settings_genai_cannot_honour_fail_clearly(preprocessor, match, tmp_path):
    """The build refuses, before writing anything, a checkpoint preprocessor_config.json
    setting genai's lfm2_vl processor would not apply."""
    from mobius.errors import ConfigError

    folder = make_lfm2_vl_checkpoint(str(tmp_path / "ckpt"))
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor, f)
    with pytest.raises(ConfigError, match=match):
        build(folder, execution_provider="cpu", dtype="f32")
