"""transformers' side of gemma3_genai_test (the reference_cases rule runs it at build time,
//rules:references.bzl). "tiny-gemma3-vl": the checkpoint (ckpt/) and per prompt
transformers' Gemma3Processor outputs and its greedy tokens on them (<prompt>.npz: the
processor's arrays, "tokens", and for "one-image" "causal_tokens": without token_type_ids).
"custom_preprocessor": a checkpoint whose preprocessor_config.json has its own rescale and
mean/std, and transformers' pixel_values for the test image (processor.npz).
"""

from __future__ import annotations

import json
import os

import numpy as np

NEW_TOKENS = 8
SEED = 3  # a checkpoint whose causal-only tokens differ for the one-image prompt
PROMPTS = {"one-image": ("The quick <start_of_image> fox", 1),
           "two-images": ("<start_of_image> and <start_of_image> jump", 2),
           "text-only": ("The quick brown fox", 0)}
CUSTOM = {"image_mean": [0.4, 0.5, 0.6], "image_std": [0.2, 0.3, 0.25],
          "rescale_factor": 1 / 200}
CUSTOM_PROMPT = "The quick <start_of_image> fox"
CASES = ["custom_preprocessor", "tiny-gemma3-vl"]


def write_images(folder: str) -> list[str]:
    """The prompts' two 64 x 64 PNG images."""
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        paths.append(os.path.join(folder, f"image{i}.png"))
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(paths[-1])
    return paths


def custom_image(path: str) -> str:
    """The custom preprocessor's test image."""
    from PIL import Image

    Image.fromarray(np.random.default_rng(6).integers(0, 256, (64, 64, 3), dtype=np.uint8)
                    ).save(path)
    return path


def write_case(case: str, folder: str) -> None:
    import tempfile

    from mobius.tiny.presets import TINY_PRESETS
    from testing.gemma3_checkpoints import make_gemma3_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    with tempfile.TemporaryDirectory() as tmp:
        if case == "custom_preprocessor":
            make_gemma3_checkpoint(ckpt)
            name = os.path.join(ckpt, "preprocessor_config.json")
            with open(name) as f:
                preprocessor = json.load(f)
            preprocessor.update(CUSTOM)
            with open(name, "w") as f:
                json.dump(preprocessor, f)
            image = custom_image(os.path.join(tmp, "image.png"))
            np.savez(os.path.join(folder, "processor.npz"), pixel_values=_hf_inputs(
                ckpt, CUSTOM_PROMPT, [image])["pixel_values"])
            return
        text = {**TINY_PRESETS["tiny-gemma3-vl"]["text_config"], "max_position_embeddings": 1024}
        make_gemma3_checkpoint(ckpt, seed=SEED, text_config=text)
        _generate(ckpt, write_images(tmp), folder)


def _hf_inputs(folder: str, prompt: str, images: list[str]):
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(folder)
    pictures = [[Image.open(p) for p in images]] if images else None
    return processor(text=prompt, images=pictures, return_tensors="np")


def _generate(ckpt, images, folder):
    from testing import vlm_runs
    from testing.hf_checkpoints import load_hf_model

    hf_model = load_hf_model(ckpt)
    for case, (prompt, count) in PROMPTS.items():
        inputs = dict(_hf_inputs(ckpt, prompt, images[:count]))
        arrays = {**inputs, "tokens": vlm_runs.hf_greedy(hf_model, inputs, NEW_TOKENS),
                  "image_token_index": hf_model.config.image_token_index}
        if case == "one-image":
            causal = {k: v for k, v in inputs.items() if k != "token_type_ids"}
            arrays["causal_tokens"] = vlm_runs.hf_greedy(hf_model, causal, NEW_TOKENS)
        np.savez(os.path.join(folder, f"{case}.npz"), **arrays)
