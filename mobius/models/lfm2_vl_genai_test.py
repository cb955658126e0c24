"""L4 (e2e): onnxruntime-genai runs the mobius LFM2-VL package as its own ``lfm2_vl``
type, with its own processor, and generates what transformers generates.

genai's lfm2_vl processor resizes the image (sides a multiple of patch *
downsample_factor, 64..256 tokens), cuts it into patches padded to
``max_num_patches``, and expands ``<image>`` in the prompt into ``<|image_start|>`` +
one ``<image>`` per token + ``<|image_end|>``, as transformers' Lfm2VlProcessor does
for one tile. Checked: genai's processor gives what transformers' processor gives
(``_hf_inputs`` of lfm2_vl_genai_cases.py, recorded at build time with transformers'
tokens: input_ids, patches, patch mask, spatial shapes; the PNG already has a valid
size, so no resize interpolates), and genai's greedy tokens (processor in,
``Generator.set_inputs``: vision -> embedding -> decoder with the conv states carried)
equal transformers' ``generate``, with one image and with two. (genai 0.18's processor batches the images of one prompt only when they
resize to one size: two sizes stop it with "image_sizes reports ... larger than the
... pixel_values batch"; the vision model itself takes mixed sizes, see
lfm2_vl_parity_test.py.)
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from mobius.models import lfm2_vl_genai_cases as cases
from mobius.models.lfm2_vl_genai_cases import NEW_TOKENS, PROMPTS, SIDE, write_images
from testing import vlm_runs
from testing.reference_cases import case_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, case folder, image paths)."""
    root = tmp_path_factory.mktemp("lfm2_vl")
    folder = case_dir(cases, "tiny-lfm2-vl")
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(root / "pkg"))
    return path, folder, write_images(str(root))


def _plain_checkpoint(tmp_path) -> str:
    """A copy of the seed-0 tiny-lfm2-vl checkpoint, to edit."""
    folder = str(tmp_path / "ckpt")
    shutil.copytree(os.path.join(case_dir(cases, "plain"), "ckpt"), folder,
                    copy_function=shutil.copyfile)
    return folder


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_genai_processor_and_generation_match_transformers(built, case):
    path, folder, image_paths = built
    prompt, count = PROMPTS[case]
    model = og.Model(path)
    inputs = model.create_multimodal_processor()(prompt,
                                                 images=og.Images.open(*image_paths[:count]))
    with np.load(os.path.join(folder, f"{case}.npz")) as data:
        expected = {k: data[k] for k in data.files}

    input_ids = inputs["input_ids"].as_numpy().astype(np.int64)
    np.testing.assert_array_equal(input_ids, expected["input_ids"])
    assert int((input_ids == expected["image_token_id"]).sum()) == count * (SIDE // 8) ** 2
    np.testing.assert_array_equal(inputs["image_sizes"].as_numpy(), expected["spatial_shapes"])
    mask = inputs["image_attention_mask"].as_numpy()
    np.testing.assert_array_equal(mask, expected["pixel_attention_mask"])
    pixels = inputs["pixel_values"].as_numpy()
    assert pixels.shape == expected["pixel_values"].shape
    assert float(np.abs(pixels - expected["pixel_values"]).max()) <= 1e-6

    tokens = vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)
    assert tokens == expected["tokens"].tolist()
    assert tokens != expected["negated_tokens"].tolist()  # the image steers them


def test_checkpoint_preprocessor_settings_reach_genai(tmp_path):
    """A checkpoint's own image token bounds and mean/std (not the family's 64..256, 0.5)
    are in the package's processor_config.json and genai_config, and genai's processor
    then normalizes and pads as transformers' does with them (the 64 x 64 image's 64
    tokens lie within 16..100: no resize)."""
    from PIL import Image

    mean, std = [0.4, 0.5, 0.6], [0.2, 0.3, 0.25]
    folder = _plain_checkpoint(tmp_path)
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

    folder = _plain_checkpoint(tmp_path)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(preprocessor, f)
    with pytest.raises(ConfigError, match=match):
        build(folder, execution_provider="cpu", dtype="f32")
