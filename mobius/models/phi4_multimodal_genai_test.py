"""L4 (e2e): onnxruntime-genai runs the mobius Phi-4-multimodal package as its own
``phi4mm`` type (vision, speech and text models), with its own processors, and
generates what transformers generates.

genai's phi4mm processor (onnxruntime-extensions' Phi-4 dynamic-HD steps of the
package's vision_processor.json) turns each ``<|image_N|>`` of the prompt into
``num_img_tokens`` copies of token 200010 and makes pixel_values (global crop +
448 px sub-crops), image_sizes and image_attention_mask. The checked facts: the
processor's token count is the tiling's (testing/phi4mm_checkpoints.token_count),
the vision model returns that many features, and genai's greedy tokens equal
transformers' ``generate`` on the processor's own tensors, for a 500 x 300 image
(2 x 1 crops, the canvas's last columns padding), two images, and text only; and
the tokens change with the image. Speech: genai's Phi-4 audio processor (log-mel,
token counts) feeds the speech model; greedy tokens equal transformers' for an
audio prompt and an image + audio prompt (the vision-speech projections), and the
tokens change with the audio. transformers ran at build time
(phi4_multimodal_genai_cases.py) on the tensors genai's processor gave there, which
the processor must give here bit for bit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from mobius.models import phi4_multimodal_genai_cases as cases
from mobius.models.phi4_multimodal_genai_cases import (NEW_TOKENS, PROMPTS, run_inputs,
                                                       run_keys, wav, write_images)
from testing import vlm_runs
from testing.phi4mm_checkpoints import GENAI_AUDIO_ID, GENAI_IMAGE_ID, token_count
from testing.reference_cases import case_dir


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, case folder, image paths)."""
    root = tmp_path_factory.mktemp("phi4mm")
    folder = case_dir(cases, "tiny-phi4mm")
    path = build(os.path.join(folder, "ckpt"), execution_provider="cpu",
                 dtype="f32").save(str(root / "pkg"))
    return path, folder, write_images(str(root))


def _transformers_tokens(folder, run, inputs) -> list[int]:
    """transformers' greedy tokens recorded for ``run``, once genai's processor ``inputs``
    equal the tensors transformers ran on."""
    with np.load(os.path.join(folder, f"{run}.npz")) as recorded:
        for key in run_keys(run):
            np.testing.assert_array_equal(inputs[key].as_numpy(), recorded[key], err_msg=key)
        return recorded["tokens"].tolist()


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_genai_generation_matches_transformers(built, case):
    path, folder, image_paths = built
    count = PROMPTS[case][1]
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    inputs = run_inputs(processor, case, image_paths, None)
    input_ids = inputs["input_ids"].as_numpy().astype(np.int64)
    expected = []
    if count:
        masks = inputs["image_attention_mask"].as_numpy()
        sizes = inputs["image_sizes"].as_numpy().astype(np.int64)
        expected = [token_count(masks[i], int(sizes[i, 1]) // 448) for i in range(count)]
        assert list(inputs["num_image_tokens"].as_numpy()) == expected
    assert int((input_ids == GENAI_IMAGE_ID).sum()) == sum(expected)

    tokens = vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)
    assert tokens == _transformers_tokens(folder, case, inputs)


def test_the_image_steers_the_tokens(built):
    """The checkpoint's tokens depend on the image (else equal tokens prove little)."""
    path, _, image_paths = built
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    runs = []
    for image in image_paths:
        inputs = processor("The quick <|image_1|> fox", images=og.Images.open(image))
        length = inputs["input_ids"].as_numpy().shape[1]
        runs.append(vlm_runs.genai_greedy(model, inputs, length, NEW_TOKENS))
    assert runs[0] != runs[1]


@pytest.mark.parametrize("with_image", [False, True], ids=["speech", "image-and-speech"])
def test_genai_speech_generation_matches_transformers(built, tmp_path, with_image):
    """genai's speech processor (log-mel, token counts) feeds the speech model; greedy
    tokens equal transformers' on the processor's tensors (vision-speech projections
    when the prompt also holds an image)."""
    path, folder, image_paths = built
    run = "image-and-speech" if with_image else "speech"
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    inputs = run_inputs(processor, run, image_paths, str(tmp_path))
    input_ids = inputs["input_ids"].as_numpy().astype(np.int64)
    sizes = inputs["audio_sizes"].as_numpy().astype(np.int64)
    assert int((input_ids == GENAI_AUDIO_ID).sum()) == int(sizes.sum()) > 0
    tokens = vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)
    assert tokens == _transformers_tokens(folder, run, inputs)


def test_the_audio_steers_the_tokens(built, tmp_path):
    path, _, _ = built
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    runs = []
    for pitch in (0.07, None):
        audio = og.Audios.open(wav(str(tmp_path / f"{pitch}.wav"), 1.5, pitch))
        inputs = processor("<|audio_1|> said", audios=audio)
        length = inputs["input_ids"].as_numpy().shape[1]
        runs.append(vlm_runs.genai_greedy(model, inputs, length, NEW_TOKENS))
    assert runs[0] != runs[1]
