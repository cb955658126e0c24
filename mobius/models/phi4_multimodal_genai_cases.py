"""transformers' side of phi4_multimodal_genai_test (the reference_cases rule runs it at
build time, //rules:references.bzl): the genai-runnable tiny checkpoint (ckpt/) and, per
prompt of the test, the inputs genai's own phi4mm processor makes for it (on the package
built from ckpt/, cpu) with transformers' greedy tokens on those very tensors
(<run>.npz: the processor's arrays by genai name, and "tokens").
"""

from __future__ import annotations

import os
import wave

import numpy as np

NEW_TOKENS = 8
SIZES = [(500, 300), (300, 460)]  # (width, height) px
PROMPTS = {"one-image": ("The quick <|image_1|> fox", 1),
           "two-images": ("<|image_1|> and <|image_2|> jump", 2),
           "text-only": ("The quick brown fox", 0)}
#: speech run: (prompt, with the first image)
SPEECH = {"speech": ("<|audio_1|> said", False),
          "image-and-speech": ("<|image_1|> and <|audio_1|> said", True)}
IMAGE_KEYS = ("pixel_values", "image_sizes", "image_attention_mask")
AUDIO_KEYS = ("audio_embeds", "audio_sizes", "audio_attention_mask")
CASES = ["tiny-phi4mm"]


def write_images(folder: str) -> list[str]:
    """The test's two PNG images (the second dark: far from the first's noise)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i, (width, height) in enumerate(SIZES):
        paths.append(os.path.join(folder, f"image{i}.png"))
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        if i:
            pixels = pixels // 8
        Image.fromarray(pixels).save(paths[-1])
    return paths


def wav(path: str, seconds: float, pitch: float | None) -> str:
    """A tone of ``pitch`` (radians per sample), or white noise for None."""
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


def run_inputs(processor, run: str, images: list[str], folder: str):
    """genai's processor inputs of ``run`` (a PROMPTS or SPEECH name); the speech runs'
    wav is written under ``folder``."""
    import onnxruntime_genai as og

    if run in PROMPTS:
        prompt, count = PROMPTS[run]
        return processor(prompt, images=og.Images.open(*images[:count]) if count else None)
    prompt, with_image = SPEECH[run]
    audio = og.Audios.open(wav(os.path.join(folder, "a.wav"), 1.5, 0.07))
    return processor(prompt, images=og.Images.open(images[0]) if with_image else None,
                     audios=audio)


def run_keys(run: str) -> tuple[str, ...]:
    """The processor outputs transformers takes for ``run`` (as genai names them)."""
    if run in PROMPTS:
        return ("input_ids", *(IMAGE_KEYS if PROMPTS[run][1] else ()))
    return ("input_ids", *AUDIO_KEYS, *(IMAGE_KEYS if SPEECH[run][1] else ()))


def write_case(case: str, folder: str) -> None:
    import tempfile

    import mobius
    from testing import vlm_runs
    from testing.phi4mm_checkpoints import load_phi4mm, make_genai_phi4mm_checkpoint

    ckpt = make_genai_phi4mm_checkpoint(os.path.join(folder, "ckpt"))
    hf_model = load_phi4mm(ckpt)
    with tempfile.TemporaryDirectory() as tmp:
        path = mobius.build(ckpt, execution_provider="cpu", dtype="f32").save(
            os.path.join(tmp, "pkg"))
        processor = vlm_runs.genai_model(path).create_multimodal_processor()
        images = write_images(tmp)
        for run in (*PROMPTS, *SPEECH):
            inputs = run_inputs(processor, run, images, tmp)
            arrays = {k: inputs[k].as_numpy() for k in run_keys(run)}
            tokens = vlm_runs.hf_greedy(hf_model, _hf_kwargs(arrays), NEW_TOKENS)
            np.savez(os.path.join(folder, f"{run}.npz"), tokens=np.array(tokens), **arrays)


def _hf_kwargs(arrays: dict) -> dict:
    """transformers' keyword arguments for genai's processor arrays."""
    kwargs = {"input_ids": arrays["input_ids"].astype(np.int64)}
    if "pixel_values" in arrays:
        kwargs.update(image_pixel_values=arrays["pixel_values"],
                      image_sizes=arrays["image_sizes"].astype(np.int64),
                      image_attention_mask=arrays["image_attention_mask"])
    if "audio_embeds" in arrays:
        kwargs.update(audio_input_features=arrays["audio_embeds"],
                      audio_embed_sizes=arrays["audio_sizes"].astype(np.int64),
                      audio_attention_mask=arrays["audio_attention_mask"])
    return kwargs
