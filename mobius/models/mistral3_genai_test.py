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
transformers' side (tokens, processor outputs) is recorded at build time
(mistral3_genai_cases.py).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from mobius.models import mistral3_genai_cases as cases
from mobius.models.mistral3_genai_cases import (IMAGES, NEW_TOKENS, SIZES, TWO_IMAGE_PROMPT,
                                                image_pixels, two_images)
from testing import vlm_runs
from testing.reference_cases import case_dir


def _npz(folder, name):
    with np.load(os.path.join(folder, name)) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, case folder, transformers' facts) for the tiny-mistral3 checkpoint,
    cpu EP."""
    root = tmp_path_factory.mktemp("mistral3")
    folder = case_dir(cases, "tiny-mistral3")
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(root / "pkg"))
    with open(os.path.join(folder, "transformers.json")) as f:
        return path, folder, json.load(f)


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
    path, folder, facts = built
    prompts = _npz(folder, "prompts.npz")
    input_ids = prompts[f"input_ids.{case}"]
    pixel_values, image_sizes = ((prompts[f"pixel_values.{case}"], prompts[f"image_sizes.{case}"])
                                 if IMAGES[case] else (None, None))
    count = facts["image_tokens"][case]
    assert _genai_generate(path, input_ids, pixel_values, image_sizes, count) == (
        facts["tokens"][case])


def test_genai_image_processor_gives_transformers_pixels(built, tmp_path):
    """The package's processor_config.json: genai's MultiModalProcessor turns a 24 x 40
    image (sides already multiples of patch * merge, within the longest edge) into
    transformers' PixtralImageProcessor pixel_values and image_sizes, and expands the
    prompt's [IMG] into the image's rows of tokens."""
    from PIL import Image

    path, folder, facts = built
    image_path = str(tmp_path / "image.png")
    Image.fromarray(image_pixels(3, (24, 40))).save(image_path)
    processor = og.Model(path).create_multimodal_processor()
    out = processor("[INST][IMG]", images=og.Images.open(image_path))
    reference = _npz(folder, "processor.npz")
    np.testing.assert_array_equal(out["image_sizes"].as_numpy(), reference["image_sizes"])
    np.testing.assert_allclose(out["pixel_values"].as_numpy(), reference["pixel_values"],
                               atol=1e-5)
    ids = out["input_ids"].as_numpy().reshape(-1).tolist()
    span = facts["image_span"]
    assert ids[-len(span):] == span


def test_genai_processor_inputs_generate_like_transformers(built, tmp_path):
    """End to end in genai: its processor's inputs for a prompt with two images of
    different sizes (padded batch + image_sizes) generate transformers' tokens for the
    same ids, pixel values and image sizes (transformers ran on the very tensors genai's
    processor gave at build time: equal here, bit for bit)."""
    from PIL import Image

    path, folder, _ = built
    images = []
    for i, pixels in enumerate(two_images()):
        images.append(str(tmp_path / f"image{i}.png"))
        Image.fromarray(pixels).save(images[-1])
    model = og.Model(path)
    inputs = model.create_multimodal_processor()(TWO_IMAGE_PROMPT,
                                                 images=og.Images.open(*images))
    recorded = _npz(folder, "genai_inputs.npz")
    for key in ("input_ids", "pixel_values", "image_sizes"):
        np.testing.assert_array_equal(inputs[key].as_numpy(), recorded[key])
    input_ids = inputs["input_ids"].as_numpy().astype(np.int64).reshape(1, -1)
    np.testing.assert_array_equal(inputs["image_sizes"].as_numpy(), np.array(SIZES))
    assert vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS) == (
        recorded["tokens"].tolist())


def test_checkpoint_preprocessor_settings_reach_genai(tmp_path):
    """A checkpoint's own longest edge and mean/std (not the tower's 64 px and CLIP's) are
    in the package's processor_config.json, and genai's processor then gives what
    transformers' PixtralImageProcessor gives with them (the 24 x 40 image fits 48 px)."""
    from PIL import Image

    folder = case_dir(cases, "custom_preprocessor")
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(tmp_path / "pkg"))
    with open(f"{path}/processor_config.json") as f:
        steps = {t["operation"]["name"]: t["operation"].get("attrs")
                 for t in json.load(f)["processor"]["transforms"]}
    assert (steps["resize"]["height"], steps["resize"]["max_pixels"]) == (48, 48 * 48)
    assert (steps["normalize"]["mean"], steps["normalize"]["std"]) == (
        [0.4, 0.5, 0.6], [0.2, 0.3, 0.25])
    Image.fromarray(image_pixels(4, (24, 40))).save(str(tmp_path / "image.png"))
    out = og.Model(path).create_multimodal_processor()(
        "[INST][IMG]", images=og.Images.open(str(tmp_path / "image.png")))
    expected = _npz(folder, "processor.npz")
    np.testing.assert_array_equal(out["image_sizes"].as_numpy(), expected["image_sizes"])
    np.testing.assert_allclose(out["pixel_values"].as_numpy(), expected["pixel_values"],
                               atol=1e-5)
