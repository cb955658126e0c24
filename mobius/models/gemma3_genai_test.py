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
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from testing.gemma3_checkpoints import make_gemma3_checkpoint
from testing import vlm_runs
from testing.hf_checkpoints import load_hf_model

NEW_TOKENS = 8
SEED = 3  # a checkpoint whose causal-only tokens differ for the one-image prompt
PROMPTS = {"one-image": ("The quick <start_of_image> fox", 1),
           "two-images": ("<start_of_image> and <start_of_image> jump", 2),
           "text-only": ("The quick brown fox", 0)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, checkpoint folder, transformers model, image paths)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("gemma3")
    folder = make_gemma3_checkpoint(str(root / "ckpt"), seed=SEED,
                                    text_config=_text_config(max_position_embeddings=1024))
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(root / "pkg"))
    rng = np.random.default_rng(0)
    images = []
    for i in range(2):
        images.append(str(root / f"image{i}.png"))
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(images[-1])
    return path, folder, load_hf_model(folder), images


def _text_config(**overrides):
    from mobius.tiny.presets import TINY_PRESETS

    return {**TINY_PRESETS["tiny-gemma3-vl"]["text_config"], **overrides}


def _hf_inputs(folder: str, prompt: str, images: list[str]):
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(folder)
    pictures = [[Image.open(p) for p in images]] if images else None
    return processor(text=prompt, images=pictures, return_tensors="np")


def _hf_generate(hf_model, inputs, token_types: bool = True) -> list[int]:
    kwargs = {k: v for k, v in inputs.items() if token_types or k != "token_type_ids"}
    return vlm_runs.hf_greedy(hf_model, kwargs, NEW_TOKENS)


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_genai_processor_and_generation_match_transformers(built, case):
    path, folder, hf_model, image_paths = built
    prompt, count = PROMPTS[case]
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    images = og.Images.open(*image_paths[:count]) if count else None
    inputs = processor(prompt, images=images)
    expected = _hf_inputs(folder, prompt, image_paths[:count])

    input_ids = inputs["input_ids"].as_numpy()
    np.testing.assert_array_equal(input_ids.astype(np.int64), expected["input_ids"])
    image_tokens = int((expected["input_ids"] == hf_model.config.image_token_index).sum())
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
    assert tokens == _hf_generate(hf_model, expected)
    if case == "one-image":
        assert tokens != _hf_generate(hf_model, expected, token_types=False)


def test_checkpoint_preprocessor_settings_reach_genai(tmp_path):
    """A checkpoint's own rescale and mean/std (not 1/255 and 0.5) are in the package's
    processor_config.json, and genai's processor then gives the pixel_values
    transformers' Gemma3Processor gives from the same checkpoint."""
    from PIL import Image

    folder = make_gemma3_checkpoint(str(tmp_path / "ckpt"))
    name = f"{folder}/preprocessor_config.json"
    with open(name) as f:
        preprocessor = json.load(f)
    preprocessor.update(image_mean=[0.4, 0.5, 0.6], image_std=[0.2, 0.3, 0.25],
                        rescale_factor=1 / 200)
    with open(name, "w") as f:
        json.dump(preprocessor, f)
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(tmp_path / "pkg"))
    with open(f"{path}/processor_config.json") as f:
        steps = {t["operation"]["name"]: t["operation"]["attrs"]
                 for t in json.load(f)["processor"]["transforms"]}
    assert (steps["normalize"]["mean"], steps["normalize"]["std"]) == (
        [0.4, 0.5, 0.6], [0.2, 0.3, 0.25])
    assert steps["rescale"]["rescale_factor"] == 1 / 200
    image = str(tmp_path / "image.png")
    Image.fromarray(np.random.default_rng(6).integers(0, 256, (64, 64, 3), dtype=np.uint8)
                    ).save(image)
    prompt = "The quick <start_of_image> fox"
    inputs = vlm_runs.genai_model(path).create_multimodal_processor()(prompt, images=og.Images.open(image))
    expected = _hf_inputs(folder, prompt, [image])["pixel_values"]
    np.testing.assert_allclose(inputs["pixel_values"].as_numpy(), expected, atol=1e-5)
