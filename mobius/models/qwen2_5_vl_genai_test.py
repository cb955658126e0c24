"""L4 (e2e): onnxruntime-genai runs the mobius Qwen2.5-VL and Qwen3-VL packages
as its own ``qwen2_5_vl`` / ``qwen3_vl`` types and greedy-generates what
transformers' ``generate`` does (Qwen3-VL: with its deepstack features carried
from the vision model to the decoder beside the embeddings).

genai's multi-modal pipeline (vision -> embedding -> decoder) computes the
decoder's 3-D position ids itself: from input_ids (an image starts after
``vision_start_token_id``), image_grid_thw and the vision section's
``spatial_merge_size``; decode steps continue each row at its rope delta. So
equal tokens over 8 steps check the package's genai_config and graphs and that
the positions after the image continue as transformers' do. The inputs are
what genai's Qwen image processor would hand over (flattened patches,
image_grid_thw, num_image_tokens, the prompt with each image's tokens
expanded), fed through ``Generator.set_inputs``. Two images with different
grids make genai run the vision model once per image; text-only prompts
(``append_tokens``) feed the embedding model zero image features.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from testing import vlm_runs
from testing.hf_checkpoints import load_hf_model
from testing.qwen2_5_vl_checkpoints import (GRID, hf_qwen_generate, image_span,
                                            image_tokens, make_pixels,
                                            make_qwen2_5_vl_checkpoint)

NEW_TOKENS = 8
#: per case, the images' (t, h, w) grids in patches
IMAGES = {"text-only": [], "one-image": [GRID], "two-images-two-grids": [GRID, (1, 4, 6)]}


#: family: (tiny preset, transformers' image processor settings beyond the vision config's,
#: the test image's height and width). Qwen3-VL's image lies above min_pixels: scaling an
#: image up to it, genai's resize rounds down where transformers' rounds up (40 x 56
#: becomes 54 x 76 patches there, 56 x 76 in transformers).
FAMILIES = {
    "qwen2_5_vl": ("tiny-qwen2_5_vl", {}, (40, 56)),
    "qwen3_vl": ("tiny-qwen3_vl", {"image_mean": [0.5] * 3, "image_std": [0.5] * 3,
                                   "min_pixels": 65536, "max_pixels": 16777216}, (236, 330)),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def built(request, tmp_path_factory):
    """(package folder, transformers model, family) for the family's tiny checkpoint, cpu EP."""
    root = tmp_path_factory.mktemp(request.param)
    folder = make_qwen2_5_vl_checkpoint(str(root / "ckpt"), preset=FAMILIES[request.param][0])
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(root / "pkg"))
    return path, load_hf_model(folder), request.param


def _prompt(config, grids, seed=0):
    rng = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in rng.integers(4, config.vision_start_token_id - 1, size=n)]  # noqa: E731
    ids = text(2)
    for grid in grids:
        ids += image_span(config, grid) + text(3)
    pixels, grid_thw = make_pixels(config, grids, rng) if grids else (None, None)
    return np.array([ids], dtype=np.int64), pixels, grid_thw


def _genai_generate(path, input_ids, pixel_values, grid_thw, tokens_per_image) -> list[int]:
    inputs = input_ids
    if pixel_values is not None:
        inputs = og.NamedTensors()
        inputs["input_ids"] = input_ids.astype(np.int32)  # genai's token type
        inputs["pixel_values"] = pixel_values
        inputs["image_grid_thw"] = grid_thw
        inputs["num_image_tokens"] = np.array(tokens_per_image, dtype=np.int64)
    return vlm_runs.genai_greedy(vlm_runs.genai_model(path), inputs, input_ids.shape[1],
                                 NEW_TOKENS)


def test_genai_config_names_the_family_type(built):
    path, hf_model, family = built
    with open(f"{path}/genai_config.json") as f:
        model = json.load(f)["model"]
    config = hf_model.config
    assert model["type"] == family
    assert (model["image_token_id"], model["vision_start_token_id"]) == (
        config.image_token_id, config.vision_start_token_id)
    assert model["vision"]["inputs"] == {"pixel_values": "pixel_values",
                                         "image_grid_thw": "image_grid_thw"}
    assert model["vision"]["spatial_merge_size"] == config.vision_config.spatial_merge_size


@pytest.mark.parametrize("case", sorted(IMAGES))
def test_genai_generates_like_transformers(built, case):
    path, hf_model, _ = built
    grids = IMAGES[case]
    input_ids, pixel_values, grid_thw = _prompt(hf_model.config, grids)
    expected = hf_qwen_generate(hf_model, input_ids, pixel_values, grid_thw, NEW_TOKENS)
    per_image = [image_tokens(hf_model.config, grid) for grid in grids]
    assert _genai_generate(path, input_ids, pixel_values, grid_thw, per_image) == expected


def test_genai_image_processor_gives_transformers_patches(built, tmp_path):
    """The package's processor_config.json: genai's MultiModalProcessor turns an image
    into the pixel_values / image_grid_thw transformers' Qwen2VLImageProcessor makes
    with the family's settings (Qwen2.5-VL: resized 40 x 56 -> 48 x 72, 12 x 18 patches
    of 4 px, 2 frames each; Qwen3-VL: 236 x 330 -> 240 x 328, mean/std 0.5)."""
    import transformers
    from PIL import Image

    path, hf_model, family = built
    pixels = (np.random.default_rng(3).random((*FAMILIES[family][2], 3)) * 255).astype(np.uint8)
    image_path = str(tmp_path / "image.png")
    Image.fromarray(pixels).save(image_path)
    processor = og.Model(path).create_multimodal_processor()
    out = processor("<|vision_start|><|image_pad|><|vision_end|>", images=og.Images.open(image_path))
    vision = hf_model.config.vision_config
    reference = transformers.Qwen2VLImageProcessorPil(
        patch_size=vision.patch_size, merge_size=vision.spatial_merge_size,
        temporal_patch_size=vision.temporal_patch_size,
        **FAMILIES[family][1])(images=Image.open(image_path), return_tensors="np")
    np.testing.assert_array_equal(out["image_grid_thw"].as_numpy().reshape(-1, 3),
                                  reference["image_grid_thw"])
    ours = out["pixel_values"].as_numpy()
    np.testing.assert_allclose(ours.reshape(reference["pixel_values"].shape),
                               reference["pixel_values"], atol=1e-5)


#: a fine-tuned checkpoint's preprocessor_config.json: other pixel bounds (the 60 x 90
#: test image is scaled down to them) and mean/std than the family's defaults
CUSTOM_PREPROCESSOR = {"min_pixels": 1024, "max_pixels": 2304, "image_mean": [0.4, 0.5, 0.6],
                       "image_std": [0.2, 0.3, 0.25], "do_normalize": True}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_checkpoint_preprocessor_settings_reach_genai(family, tmp_path):
    """The checkpoint's own min/max pixels and mean/std (not the family's) are in the
    package's processor_config.json, and genai's processor then makes the patches
    transformers' processor makes with them."""
    import transformers
    from PIL import Image

    folder = make_qwen2_5_vl_checkpoint(str(tmp_path / "ckpt"), preset=FAMILIES[family][0])
    with open(f"{folder}/config.json") as f:
        vision = json.load(f)["vision_config"]
    reference = transformers.Qwen2VLImageProcessorPil(
        patch_size=vision["patch_size"], merge_size=vision["spatial_merge_size"],
        temporal_patch_size=vision["temporal_patch_size"], **CUSTOM_PREPROCESSOR)
    reference.save_pretrained(folder)  # the checkpoint's preprocessor_config.json
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(tmp_path / "pkg"))
    with open(f"{path}/processor_config.json") as f:
        steps = {t["operation"]["name"]: t["operation"].get("attrs")
                 for t in json.load(f)["processor"]["transforms"]}
    assert (steps["resize"]["min_pixels"], steps["resize"]["max_pixels"]) == (1024, 2304)
    assert (steps["normalize"]["mean"], steps["normalize"]["std"]) == (
        CUSTOM_PREPROCESSOR["image_mean"], CUSTOM_PREPROCESSOR["image_std"])
    pixels = (np.random.default_rng(4).random((60, 90, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(str(tmp_path / "image.png"))
    out = og.Model(path).create_multimodal_processor()(
        "<|vision_start|><|image_pad|><|vision_end|>",
        images=og.Images.open(str(tmp_path / "image.png")))
    expected = reference(images=Image.open(str(tmp_path / "image.png")), return_tensors="np")
    np.testing.assert_array_equal(out["image_grid_thw"].as_numpy().reshape(-1, 3),
                                  expected["image_grid_thw"])
    np.testing.assert_allclose(out["pixel_values"].as_numpy().reshape(
        expected["pixel_values"].shape), expected["pixel_values"], atol=1e-5)
