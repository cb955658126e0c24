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
tokens change with the audio.
"""

from __future__ import annotations

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from testing import vlm_runs
from testing.phi4mm_checkpoints import (GENAI_AUDIO_ID, GENAI_IMAGE_ID,
                                        load_phi4mm,
                                        make_genai_phi4mm_checkpoint, token_count)

NEW_TOKENS = 8
SIZES = [(500, 300), (300, 460)]  # (width, height) px
PROMPTS = {"one-image": ("The quick <|image_1|> fox", 1),
           "two-images": ("<|image_1|> and <|image_2|> jump", 2),
           "text-only": ("The quick brown fox", 0)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package folder, transformers model, image paths)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("phi4mm")
    folder = make_genai_phi4mm_checkpoint(str(root / "ckpt"))
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(root / "pkg"))
    rng = np.random.default_rng(0)
    images = []
    for i, (width, height) in enumerate(SIZES):
        images.append(str(root / f"image{i}.png"))
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        if i:  # a dark picture: far from the first's noise
            pixels = pixels // 8
        Image.fromarray(pixels).save(images[-1])
    return path, load_phi4mm(folder), images


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_genai_generation_matches_transformers(built, case):
    path, hf_model, image_paths = built
    prompt, count = PROMPTS[case]
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    images = og.Images.open(*image_paths[:count]) if count else None
    inputs = processor(prompt, images=images)
    input_ids = inputs["input_ids"].as_numpy().astype(np.int64)
    tensors, expected = {}, []
    if count:
        tensors = {"image_pixel_values": inputs["pixel_values"].as_numpy(),
                   "image_sizes": inputs["image_sizes"].as_numpy().astype(np.int64),
                   "image_attention_mask": inputs["image_attention_mask"].as_numpy()}
        masks = tensors["image_attention_mask"]
        expected = [token_count(masks[i], int(tensors["image_sizes"][i, 1]) // 448)
                    for i in range(count)]
        assert list(inputs["num_image_tokens"].as_numpy()) == expected
    assert int((input_ids == GENAI_IMAGE_ID).sum()) == sum(expected)

    tokens = vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)
    assert tokens == vlm_runs.hf_greedy(hf_model, {"input_ids": input_ids, **tensors},
                                        NEW_TOKENS)


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


def _wav(path: str, seconds: float, pitch: float | None) -> str:
    """A tone of ``pitch`` (radians per sample), or white noise for None."""
    import wave

    t = np.arange(int(16000 * seconds))
    if pitch is None:
        samples = np.random.default_rng(0).standard_normal(t.shape) * 6000
    else:
        samples = np.sin(t * pitch) * 8000 + np.sin(t * 0.013) * 3000
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes(samples.astype(np.int16).tobytes())
    return path


@pytest.mark.parametrize("with_image", [False, True], ids=["speech", "image-and-speech"])
def test_genai_speech_generation_matches_transformers(built, tmp_path, with_image):
    """genai's speech processor (log-mel, token counts) feeds the speech model; greedy
    tokens equal transformers' on the processor's tensors (vision-speech projections
    when the prompt also holds an image)."""
    path, hf_model, image_paths = built
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    audio = og.Audios.open(_wav(str(tmp_path / "a.wav"), 1.5, 0.07))
    prompt = ("<|image_1|> and " if with_image else "") + "<|audio_1|> said"
    images = og.Images.open(image_paths[0]) if with_image else None
    inputs = processor(prompt, images=images, audios=audio)
    input_ids = inputs["input_ids"].as_numpy().astype(np.int64)
    sizes = inputs["audio_sizes"].as_numpy().astype(np.int64)
    assert int((input_ids == GENAI_AUDIO_ID).sum()) == int(sizes.sum()) > 0
    tensors = {"audio_input_features": inputs["audio_embeds"].as_numpy(),
               "audio_embed_sizes": sizes,
               "audio_attention_mask": inputs["audio_attention_mask"].as_numpy()}
    if with_image:
        tensors.update({"image_pixel_values": inputs["pixel_values"].as_numpy(),
                        "image_sizes": inputs["image_sizes"].as_numpy().astype(np.int64),
                        "image_attention_mask": inputs["image_attention_mask"].as_numpy()})
    tokens = vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)
    assert tokens == vlm_runs.hf_greedy(hf_model, {"input_ids": input_ids, **tensors},
                                        NEW_TOKENS)


def test_the_audio_steers_the_tokens(built, tmp_path):
    path, _, _ = built
    model = vlm_runs.genai_model(path)
    processor = model.create_multimodal_processor()
    runs = []
    for pitch in (0.07, None):
        audio = og.Audios.open(_wav(str(tmp_path / f"{pitch}.wav"), 1.5, pitch))
        inputs = processor("<|audio_1|> said", audios=audio)
        length = inputs["input_ids"].as_numpy().shape[1]
        runs.append(vlm_runs.genai_greedy(model, inputs, length, NEW_TOKENS))
    assert runs[0] != runs[1]
