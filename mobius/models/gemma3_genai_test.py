"""L4 (e2e): onnxruntime-genai runs the mobius Gemma 3 package as its own ``gemma3``
type, with its own processor, and generates what transformers generates.

genai's gemma3 processor expands each ``<start_of_image>`` of the prompt into
"\\n\\n<start_of_image>" + 256 x "<image_soft_token>" + "<end_of_image>\\n\\n"
(256 is fixed in genai, so the tiny checkpoint keeps 256 tokens per image) and
makes pixel_values with the onnxruntime-extensions steps of the package's
processor_config.json. The checked facts:

* the same prompt and image give genai's processor and transformers'
  Gemma3Processor the same input_ids and pixel_values (to 1e-6; the PNG is already
  at the tower's size, so neither side's resize interpolates);
* genai's greedy tokens (processor in, ``Generator.set_inputs``) equal
  transformers' ``generate`` on the processor's inputs, token_type_ids included,
  for one image, two images and text only; on the chosen checkpoint the causal-only
  tokens of transformers differ, so the decoder's two-way image attention is
  what makes them equal.

Two images: genai 0.18's gemma3 processor reports ``num_image_tokens`` = [256] for
the whole prompt whatever the image count, and genai sizes the vision output
[num_image_tokens, hidden] from it, so the vision run (2 x 256 rows) fails. The
test checks that report and then feeds the processor's tensors with the true
per-image counts [256, 256], as a caller of ``set_inputs`` can. (A vision output
[images, 256, hidden] would fit that report, but genai then hands the embedding
model [images, 0, hidden] or, with no image, [0, hidden]: no fixed-rank input
takes both, and the ONNX checker requires main-graph inputs to have a shape. Text-only
prompts matter more, so image_features stays [num_image_tokens, hidden].)

transformers' side (its processor's outputs and tokens) is recorded at build time
(gemma3_genai_cases.py).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from mobius.models import gemma3_genai_cases as cases
from mobius.models.gemma3_genai_cases import (CUSTOM_PROMPT, NEW_TOKENS, PROMPTS, custom_image,
                                              write_images)
from testing import vlm_runs
from testing.reference_cases import case_dir


def _npz(folder, name):
    with np.load(os.path.join(folder, name)) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, case folder, image paths)."""
    root = tmp_path_factory.mktemp("gemma3")
    folder = case_dir(cases, "tiny-gemma3-vl")
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(root / "pkg"))
    return path, folder, write_images(str(root))


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_genai_processor_and_generation_match_transformers(built, case):
    path, folder, image_paths = built
    prompt, count = PROMPTS[case]
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    images = og.Images.open(*image_paths[:count]) if count else None
    inputs = processor(prompt, images=images)
    expected = _npz(folder, f"{case}.npz")

    input_ids = inputs["input_ids"].as_numpy()
    np.testing.assert_array_equal(input_ids.astype(np.int64), expected["input_ids"])
    image_tokens = int((expected["input_ids"] == expected["image_token_index"]).sum())
    assert image_tokens == 256 * count
    if count:
        pixels = inputs["pixel_values"].as_numpy()
        assert pixels.shape == expected["pixel_values"].shape
        assert float(np.abs(pixels - expected["pixel_values"]).max()) <= 1e-6

    if count > 1:  # genai's processor counts one image's tokens (see the module docstring)
        np.testing.assert_array_equal(inputs["num_image_tokens"].as_numpy(), [256])
        named = og.NamedTensors()
        for name in ("input_ids", "pixel_values"):
            named[name] = inputs[name].as_numpy()
        named["num_image_tokens"] = np.full(count, 256, dtype=np.int64)
        inputs = named
    tokens = vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)
    assert tokens == expected["tokens"].tolist()
    if case == "one-image":
        assert tokens != expected["causal_tokens"].tolist()


def test_checkpoint_preprocessor_settings_reach_genai(tmp_path):
    """A checkpoint's own rescale and mean/std (not 1/255 and 0.5) are in the package's
    processor_config.json, and genai's processor then gives the pixel_values
    transformers' Gemma3Processor gives from the same checkpoint."""
    folder = case_dir(cases, "custom_preprocessor")
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(tmp_path / "pkg"))
    with open(f"{path}/processor_config.json") as f:
        steps = {t["operation"]["name"]: t["operation"]["attrs"]
                 for t in json.load(f)["processor"]["transforms"]}
    assert (steps["normalize"]["mean"], steps["normalize"]["std"]) == (
        [0.4, 0.5, 0.6], [0.2, 0.3, 0.25])
    assert steps["rescale"]["rescale_factor"] == 1 / 200
    image = custom_image(str(tmp_path / "image.png"))
    inputs = vlm_runs.genai_model(path).create_multimodal_processor()(
        CUSTOM_PROMPT, images=og.Images.open(image))
    expected = _npz(folder, "processor.npz")["pixel_values"]
    np.testing.assert_allclose(inputs["pixel_values"].as_numpy(), expected, atol=1e-5)
