"""L4 (e2e): onnxruntime-genai runs the mobius Mistral 3 package as its own
``mistral3`` type and greedy-generates what transformers' ``generate`` does.

The inputs are what genai's Pixtral processor would hand over (pixel_values
zero-padded to the largest image, image_sizes [images, 2], num_image_tokens,
the prompt with each image's [IMG] / [IMG_BREAK] / [IMG_END] tokens), fed
through ``Generator.set_inputs``. One non-square image runs the vision model
once; two images of different sizes make genai crop each out of the padded batch
by image_sizes and run the vision model once per image; a text-only prompt
(``append_tokens``) feeds the embedding model zero image features. The
package's processor config is checked against transformers' PixtralImageProcessor.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from testing import vlm_runs
from testing.hf_checkpoints import load_hf_model
from testing.mistral3_checkpoints import (SIZES, TOKEN_IDS, hf_mistral3_generate,
                                          image_span, make_images, make_mistral3_checkpoint,
                                          merged_grid)

NEW_TOKENS = 8
#: per case, the images' (height, width) in pixels
IMAGES = {"text-only": [], "one-image": [SIZES[0]], "two-images-two-sizes": list(SIZES)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, transformers model) for the tiny-mistral3 checkpoint, cpu EP."""
    root = tmp_path_factory.mktemp("mistral3")
    folder = make_mistral3_checkpoint(str(root / "ckpt"))
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(root / "pkg"))
    return path, load_hf_model(folder)


def _prompt(config, sizes, seed=0):
    rng = np.random.default_rng(seed)
    first_image_token = min(TOKEN_IDS.values())
    text = lambda n: [int(t) for t in rng.integers(4, first_image_token, size=n)]  # noqa: E731
    ids = text(2)
    for size in sizes:
        ids += image_span(config, size) + text(3)
    if not sizes:
        return np.array([ids], dtype=np.int64), None, None
    _, padded, image_sizes = make_images(config, sizes, rng)
    return np.array([ids], dtype=np.int64), padded, image_sizes


def _genai_generate(path, input_ids, pixel_values, image_sizes, image_tokens) -> list[int]:
    inputs = input_ids
    if pixel_values is not None:
        inputs = og.NamedTensors()
        inputs["input_ids"] = input_ids.astype(np.int32)  # genai's token type
        inputs["pixel_values"] = pixel_values
        inputs["image_sizes"] = image_sizes
        inputs["num_image_tokens"] = np.array([image_tokens], dtype=np.int64)
    return vlm_runs.genai_greedy(vlm_runs.genai_model(path), inputs, input_ids.shape[1],
                                 NEW_TOKENS)


@pytest.mark.parametrize("case", sorted(IMAGES))
def test_genai_generates_like_transformers(built, case):
    path, hf_model = built
    sizes = IMAGES[case]
    input_ids, pixel_values, image_sizes = _prompt(hf_model.config, sizes)
    expected = hf_mistral3_generate(hf_model, input_ids, pixel_values, image_sizes, NEW_TOKENS)
    count = sum(int(np.prod(merged_grid(hf_model.config, size))) for size in sizes)
    assert _genai_generate(path, input_ids, pixel_values, image_sizes, count) == expected


def test_genai_image_processor_gives_transformers_pixels(built, tmp_path):
    """The package's processor_config.json: genai's MultiModalProcessor turns a 24 x 40
    image (sides already multiples of patch * merge, within the longest edge) into
    transformers' PixtralImageProcessor pixel_values and image_sizes, and expands the
    prompt's [IMG] into the image's rows of tokens."""
    import transformers
    from PIL import Image

    path, hf_model = built
    pixels = (np.random.default_rng(3).random((24, 40, 3)) * 255).astype(np.uint8)
    image_path = str(tmp_path / "image.png")
    Image.fromarray(pixels).save(image_path)
    processor = og.Model(path).create_multimodal_processor()
    out = processor("[INST][IMG]", images=og.Images.open(image_path))
    config = hf_model.config
    side = config.vision_config.patch_size * config.spatial_merge_size
    reference = transformers.PixtralImageProcessorPil(
        patch_size={"height": side, "width": side},
        size={"longest_edge": config.vision_config.image_size})(
            images=Image.open(image_path), return_tensors="np")
    np.testing.assert_array_equal(out["image_sizes"].as_numpy(), reference["image_sizes"])
    np.testing.assert_allclose(out["pixel_values"].as_numpy(), reference["pixel_values"],
                               atol=1e-5)
    ids = out["input_ids"].as_numpy().reshape(-1).tolist()
    assert ids[-len(image_span(config, (24, 40))):] == image_span(config, (24, 40))


def test_genai_processor_inputs_generate_like_transformers(built, tmp_path):
    """End to end in genai: its processor's inputs for a prompt with two images of
    different sizes (padded batch + image_sizes) generate transformers' tokens for the
    same ids, pixel values and image sizes."""
    from PIL import Image

    path, hf_model = built
    rng = np.random.default_rng(4)
    images = []
    for i, (height, width) in enumerate(SIZES):
        images.append(str(tmp_path / f"image{i}.png"))
        Image.fromarray((rng.random((height, width, 3)) * 255).astype(np.uint8)).save(images[-1])
    model = og.Model(path)
    inputs = model.create_multimodal_processor()("[INST][IMG] and [IMG]",
                                                 images=og.Images.open(*images))
    input_ids = inputs["input_ids"].as_numpy().astype(np.int64).reshape(1, -1)
    pixel_values = inputs["pixel_values"].as_numpy()
    image_sizes = inputs["image_sizes"].as_numpy()
    np.testing.assert_array_equal(image_sizes, np.array(SIZES))
    expected = hf_mistral3_generate(hf_model, input_ids, pixel_values, image_sizes, NEW_TOKENS)
    assert vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS) == expected


def test_checkpoint_preprocessor_settings_reach_genai(tmp_path):
    """A checkpoint's own longest edge and mean/std (not the tower's 64 px and CLIP's) are
    in the package's processor_config.json, and genai's processor then gives what
    transformers' PixtralImageProcessor gives with them (the 24 x 40 image fits 48 px)."""
    import transformers
    from PIL import Image

    folder = make_mistral3_checkpoint(str(tmp_path / "ckpt"))
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    side = config["vision_config"]["patch_size"] * config["spatial_merge_size"]
    reference = transformers.PixtralImageProcessorPil(
        patch_size={"height": side, "width": side}, size={"longest_edge": 48},
        image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.3, 0.25])
    reference.save_pretrained(folder)  # the checkpoint's preprocessor_config.json
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(tmp_path / "pkg"))
    with open(f"{path}/processor_config.json") as f:
        steps = {t["operation"]["name"]: t["operation"].get("attrs")
                 for t in json.load(f)["processor"]["transforms"]}
    assert (steps["resize"]["height"], steps["resize"]["max_pixels"]) == (48, 48 * 48)
    assert (steps["normalize"]["mean"], steps["normalize"]["std"]) == (
        [0.4, 0.5, 0.6], [0.2, 0.3, 0.25])
    pixels = (np.random.default_rng(4).random((24, 40, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(str(tmp_path / "image.png"))
    out = og.Model(path).create_multimodal_processor()(
        "[INST][IMG]", images=og.Images.open(str(tmp_path / "image.png")))
    expected = reference(images=Image.open(str(tmp_path / "image.png")), return_tensors="np")
    np.testing.assert_array_equal(out["image_sizes"].as_numpy(), expected["image_sizes"])
    np.testing.assert_allclose(out["pixel_values"].as_numpy(), expected["pixel_values"],
                               atol=1e-5)
