"""L4 (e2e): onnxruntime-genai runs the mobius Phi-4-multimodal package as its own
``phi4mm`` type (vision + text: the genai_config's speech section is cleared), with
its own processor, and generates what transformers generates.

genai's phi4mm processor (onnxruntime-extensions' Phi-4 dynamic-HD steps of the
package's vision_processor.json) turns each ``<|image_N|>`` of the prompt into
``num_img_tokens`` copies of token 200010 and makes pixel_values (global crop +
448 px sub-crops), image_sizes and image_attention_mask. The checked facts: the
processor's token count is the tiling's (testing/phi4mm_checkpoints.token_count),
the vision model returns that many features, and genai's greedy tokens equal
transformers' ``generate`` on the processor's own tensors, for a 500 x 300 image
(2 x 1 crops, the canvas's last columns padding), two images, and text only; and
the tokens change with the image. Audio input is refused by genai with its
"speech support is not configured" error (the package has no speech model).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

og = pytest.importorskip("onnxruntime_genai")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mobius.builder import build  # noqa: E402
from testing.phi4mm_checkpoints import (GENAI_IMAGE_ID, load_phi4mm,  # noqa: E402
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


def _genai(path: str):
    config = og.Config(path)
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": 1}}}}))
    return og.Model(config)


def _hf_generate(hf_model, input_ids, images) -> list[int]:
    kwargs = {name: torch.from_numpy(value) for name, value in images.items()}
    with torch.no_grad():
        out = hf_model.generate(input_ids=torch.from_numpy(input_ids), **kwargs,
                                max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                do_sample=False, num_beams=1, pad_token_id=0,
                                temperature=None, top_p=None, top_k=None)
    return [int(t) for t in out[0, input_ids.shape[1]:]]


def _genai_generate(model, inputs, length: int) -> list[int]:
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=length + NEW_TOKENS,
                              min_length=length + NEW_TOKENS)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens


@pytest.mark.parametrize("case", sorted(PROMPTS))
def test_genai_generation_matches_transformers(built, case):
    path, hf_model, image_paths = built
    prompt, count = PROMPTS[case]
    model = _genai(path)
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

    tokens = _genai_generate(model, inputs, input_ids.shape[1])
    assert tokens == _hf_generate(hf_model, input_ids, tensors)


def test_the_image_steers_the_tokens(built):
    """The checkpoint's tokens depend on the image (else equal tokens prove little)."""
    path, _, image_paths = built
    model = _genai(path)
    processor = model.create_multimodal_processor()
    runs = []
    for image in image_paths:
        inputs = processor("The quick <|image_1|> fox", images=og.Images.open(image))
        runs.append(_genai_generate(model, inputs, inputs["input_ids"].as_numpy().shape[1]))
    assert runs[0] != runs[1]


def test_audio_input_is_refused(built, tmp_path):
    """No speech model in the package: genai's phi4mm processor says so for audio."""
    import wave

    path, _, _ = built
    audio = str(tmp_path / "tone.wav")
    with wave.open(audio, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes((np.sin(np.arange(8000) * 0.1) * 8000).astype(np.int16).tobytes())
    processor = _genai(path).create_multimodal_processor()
    with pytest.raises(Exception, match="audio/speech support is not configured"):
        processor("<|audio_1|> said", audios=og.Audios.open(audio))
