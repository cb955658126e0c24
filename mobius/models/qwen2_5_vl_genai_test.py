"""L4 (e2e): onnxruntime-genai runs the mobius Qwen2.5-VL, Qwen3-VL and Qwen 3.5
(dense, MoE) packages as its own ``qwen2_5_vl`` / ``qwen3_vl`` / ``qwen3_5`` /
``qwen3_5_moe`` types and greedy-generates what transformers' ``generate`` does
(Qwen3-VL: with its deepstack features carried from the vision model to the decoder
beside the embeddings; Qwen 3.5: the DeltaNet layers' conv and recurrent states
carried by genai between steps).

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
(``append_tokens``) feed the embedding model zero image features. transformers'
side (tokens, image processor outputs) is recorded at build time
(qwen2_5_vl_genai_cases.py).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from mobius.models import qwen2_5_vl_genai_cases as cases
from mobius.models.qwen2_5_vl_genai_cases import (CUSTOM, CUSTOM_PREPROCESSOR, FAMILIES,
                                                  IMAGES, NEW_TOKENS, image_pixels)
from testing import vlm_runs
from testing.reference_cases import case_dir


def _processed(folder):
    """transformers' Qwen2VLImageProcessor output recorded for the case's test image."""
    with np.load(os.path.join(folder, "processor.npz")) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def built(request, tmp_path_factory):
    """(package folder, case folder, transformers' facts) for the family's tiny checkpoint,
    cpu EP."""
    root = tmp_path_factory.mktemp(request.param)
    folder = case_dir(cases, request.param)
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(root / "pkg"))
    with open(os.path.join(folder, "transformers.json")) as f:
        return path, folder, json.load(f), request.param


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
    path, _, facts, family = built
    with open(f"{path}/genai_config.json") as f:
        model = json.load(f)["model"]
    assert model["type"] == family
    assert (model["image_token_id"], model["vision_start_token_id"]) == (
        facts["image_token_id"], facts["vision_start_token_id"])
    assert model["vision"]["inputs"] == {"pixel_values": "pixel_values",
                                         "image_grid_thw": "image_grid_thw"}
    assert model["vision"]["spatial_merge_size"] == facts["spatial_merge_size"]


@pytest.mark.parametrize("case", sorted(IMAGES))
def test_genai_generates_like_transformers(built, case):
    path, folder, facts, _ = built
    with np.load(os.path.join(folder, "prompts.npz")) as prompts:
        input_ids = prompts[f"input_ids.{case}"]
        pixel_values, grid_thw = ((prompts[f"pixel_values.{case}"],
                                   prompts[f"image_grid_thw.{case}"]) if IMAGES[case]
                                  else (None, None))
    assert _genai_generate(path, input_ids, pixel_values, grid_thw,
                           facts["per_image"][case]) == facts["tokens"][case]


def test_genai_image_processor_gives_transformers_patches(built, tmp_path):
    """The package's processor_config.json: genai's MultiModalProcessor turns an image
    into the pixel_values / image_grid_thw transformers' Qwen2VLImageProcessor makes
    with the family's settings (Qwen2.5-VL: resized 40 x 56 -> 48 x 72, 12 x 18 patches
    of 4 px, 2 frames each; Qwen3-VL: 236 x 330 -> 240 x 328, mean/std 0.5)."""
    from PIL import Image

    path, folder, _, family = built
    image_path = str(tmp_path / "image.png")
    Image.fromarray(image_pixels(family)).save(image_path)
    processor = og.Model(path).create_multimodal_processor()
    out = processor("<|vision_start|><|image_pad|><|vision_end|>", images=og.Images.open(image_path))
    reference = _processed(folder)
    np.testing.assert_array_equal(out["image_grid_thw"].as_numpy().reshape(-1, 3),
                                  reference["image_grid_thw"])
    ours = out["pixel_values"].as_numpy()
    np.testing.assert_allclose(ours.reshape(reference["pixel_values"].shape),
                               reference["pixel_values"], atol=1e-5)


@pytest.mark.parametrize("family", CUSTOM)
def test_checkpoint_preprocessor_settings_reach_genai(family, tmp_path):
    """The checkpoint's own min/max pixels and mean/std (not the family's) are in the
    package's processor_config.json, and genai's processor then makes the patches
    transformers' processor makes with them."""
    from PIL import Image

    folder = case_dir(cases, f"{family}_custom")
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(tmp_path / "pkg"))
    with open(f"{path}/processor_config.json") as f:
        steps = {t["operation"]["name"]: t["operation"].get("attrs")
                 for t in json.load(f)["processor"]["transforms"]}
    assert (steps["resize"]["min_pixels"], steps["resize"]["max_pixels"]) == (1024, 2304)
    assert (steps["normalize"]["mean"], steps["normalize"]["std"]) == (
        CUSTOM_PREPROCESSOR["image_mean"], CUSTOM_PREPROCESSOR["image_std"])
    Image.fromarray(image_pixels(None)).save(str(tmp_path / "image.png"))
    out = og.Model(path).create_multimodal_processor()(
        "<|vision_start|><|image_pad|><|vision_end|>",
        images=og.Images.open(str(tmp_path / "image.png")))
    expected = _processed(folder)
    np.testing.assert_array_equal(out["image_grid_thw"].as_numpy().reshape(-1, 3),
                                  expected["image_grid_thw"])
    np.testing.assert_allclose(out["pixel_values"].as_numpy().reshape(
        expected["pixel_values"].shape), expected["pixel_values"], atol=1e-5)
