"""L4 (e2e): what onnxruntime-genai does with a mobius LLaVA package.

onnxruntime-genai 0.18 cannot run a LLaVA package as-is, for two reasons outside mobius:

1. Model type. genai dispatches on genai_config ``model.type`` and knows no
   "llava" (its multi-modal types are other families': phi3v, gemma3,
   qwen2_5_vl, mistral3, ...), so ``og.Model`` raises "Unsupported model_type
   in config.json: llava". mobius writes the honest type (a different
   family's type would select that family's image processor and prompt
   handling).
2. Processor. genai's ``MultiModalProcessor`` has no LLaVA image processor
   (CLIP resize / center-crop / normalize from a processor_config.json) nor the
   prompt expansion of ``<image>`` into ``image_seq_length`` image tokens.

What genai does run is the rest of its multi-modal pipeline (vision ->
embedding -> decoder, MultiModalPipelineState), which is type-agnostic for
"phi3v": a plain VisionState, default position inputs, no adapters unless
configured. So the package's genai_config.json (vision / embedding / decoder
sections, image_token_id) and its three graphs are checked by loading it with
``model.type`` overlaid to "phi3v" and feeding what a LLaVA processor would
produce -- pixel_values, input_ids with the image tokens already expanded, and
num_image_tokens -- through ``Generator.set_inputs``; genai's greedy tokens must
equal transformers' ``generate`` on the same inputs (recorded at build time:
llava_genai_cases.py). Text-only prompts
(``append_tokens``, no image) must work too (genai then feeds the embedding
model zero image features).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from mobius.models import llava_genai_cases as cases
from mobius.models.llava_genai_cases import IMAGES, NEW_TOKENS
from testing import vlm_runs
from testing.reference_cases import case_dir

STAND_IN_TYPE = "phi3v"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, transformers' recorded run) for the tiny-llava checkpoint, cpu EP."""
    root = tmp_path_factory.mktemp("llava")
    folder = case_dir(cases, "tiny-llava")
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(root / "pkg"))
    with open(os.path.join(folder, "transformers.json")) as f:
        reference = json.load(f)
    with np.load(os.path.join(folder, "prompts.npz")) as prompts:
        reference["prompts"] = {n: (prompts[f"input_ids.{n}"], prompts[f"pixel_values.{n}"])
                                for n in IMAGES}
    return path, reference


def _genai_model(path: str, model_type: str | None = None):
    config = og.Config(path)
    overlay = {"decoder": {"session_options": {"intra_op_num_threads": 1}}}
    if model_type:
        overlay["type"] = model_type
    config.overlay(json.dumps({"model": overlay}))
    return og.Model(config)


def test_genai_has_no_llava_model_type(built):
    path, _ = built
    with open(f"{path}/genai_config.json") as f:
        assert json.load(f)["model"]["type"] == "llava"
    try:
        _genai_model(path)
    except Exception as e:  # noqa: BLE001 - genai raises a plain RuntimeError
        assert "Unsupported model_type in config.json: llava" in str(e)
    else:  # a genai that knows llava: the other tests should then drop the stand-in type
        pytest.fail(f"onnxruntime-genai {og.__version__} loads model.type 'llava' now")


def _genai_generate(model, input_ids, pixel_values, image_token: int) -> list[int]:
    inputs = input_ids
    if pixel_values is not None:
        inputs = og.NamedTensors()
        inputs["input_ids"] = input_ids.astype(np.int32)  # genai's token type; int64 is misread
        inputs["pixel_values"] = pixel_values
        per_image = int((input_ids == image_token).sum()) // len(pixel_values)
        inputs["num_image_tokens"] = np.full(len(pixel_values), per_image, dtype=np.int64)
    return vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)


@pytest.mark.parametrize("images", [0, 1, 2], ids=["text-only", "one-image", "two-images"])
def test_genai_pipeline_generates_like_transformers(built, images):
    path, reference = built
    model = _genai_model(path, STAND_IN_TYPE)
    input_ids, pixel_values = reference["prompts"][images]
    pixel_values = pixel_values if images else None
    expected = reference["tokens"][str(images)]
    image_token = reference["image_token_index"]
    assert _genai_generate(model, input_ids, pixel_values, image_token) == expected
