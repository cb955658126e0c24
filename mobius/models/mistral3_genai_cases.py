"""transformers' side of mistral3_genai_test (the reference_cases rule runs it at build
time, //rules:references.bzl). "tiny-mistral3": the checkpoint (ckpt/), per IMAGES case its
prompt and transformers' greedy tokens (prompts.npz, transformers.json), transformers'
PixtralImageProcessor output for the 24 x 40 test image (processor.npz), and for the
two-image prompt genai's own processor inputs (built package, cpu) with transformers'
tokens on them (genai_inputs.npz). "custom_preprocessor": a checkpoint whose
preprocessor_config.json transformers saved with its own longest edge and mean/std, and
that processor's output (processor.npz).
"""

from __future__ import annotations

import json
import os

import numpy as np

from testing.mistral3_checkpoints import SIZES

NEW_TOKENS = 8
#: per case, the images' (height, width) in pixels
IMAGES = {"text-only": [], "one-image": [SIZES[0]], "two-images-two-sizes": list(SIZES)}
#: the preprocessor settings of "custom_preprocessor"
CUSTOM = {"size": {"longest_edge": 48}, "image_mean": [0.4, 0.5, 0.6],
          "image_std": [0.2, 0.3, 0.25]}
TWO_IMAGE_PROMPT = "[INST][IMG] and [IMG]"
CASES = ["custom_preprocessor", "tiny-mistral3"]


def image_pixels(seed: int, size) -> np.ndarray:
    """A test image, [h, w, 3] uint8."""
    return (np.random.default_rng(seed).random((*size, 3)) * 255).astype(np.uint8)


def two_images() -> list[np.ndarray]:
    """The two-image prompt's images (SIZES), drawn from one generator."""
    rng = np.random.default_rng(4)
    return [(rng.random((h, w, 3)) * 255).astype(np.uint8) for h, w in SIZES]


#: what processor.npz keeps of transformers' image processor output
PROCESSED = ("pixel_values", "image_sizes")

def write_case(case: str, folder: str) -> None:
    from testing import vlm_reference
    from testing.hf_checkpoints import load_hf_model
    from testing.mistral3_checkpoints import make_mistral3_checkpoint

    ckpt = make_mistral3_checkpoint(os.path.join(folder, "ckpt"))
    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    side = config["vision_config"]["patch_size"] * config["spatial_merge_size"]
    if case == "custom_preprocessor":
        processor = _processor(side, **CUSTOM)
        processor.save_pretrained(ckpt)  # the checkpoint's preprocessor_config.json
        vlm_reference.save_processed(processor, image_pixels(4, (24, 40)), folder, PROCESSED)
        return
    hf_model = load_hf_model(ckpt)
    processor = _processor(side, size={"longest_edge": config["vision_config"]["image_size"]})
    vlm_reference.save_processed(processor, image_pixels(3, (24, 40)), folder, PROCESSED)
    _generate(hf_model, folder)
    _genai_inputs(hf_model, ckpt, folder)


def _processor(side, **settings):
    import transformers

    return transformers.PixtralImageProcessorPil(patch_size={"height": side, "width": side},
                                                 **settings)


def _generate(hf_model, folder):
    from testing.mistral3_checkpoints import (TOKEN_IDS, hf_mistral3_generate, image_span,
                                              make_images, merged_grid)

    config = hf_model.config
    arrays, tokens, counts = {}, {}, {}
    for case, sizes in IMAGES.items():
        rng = np.random.default_rng(0)
        high = min(TOKEN_IDS.values())
        ids = [int(t) for t in rng.integers(4, high, size=2)]
        for size in sizes:
            ids += image_span(config, size) + [int(t) for t in rng.integers(4, high, size=3)]
        input_ids = np.array([ids], dtype=np.int64)
        padded = image_sizes = None
        arrays[f"input_ids.{case}"] = input_ids
        if sizes:
            _, padded, image_sizes = make_images(config, sizes, rng)
            arrays[f"pixel_values.{case}"], arrays[f"image_sizes.{case}"] = padded, image_sizes
        tokens[case] = hf_mistral3_generate(hf_model, input_ids, padded, image_sizes, NEW_TOKENS)
        counts[case] = sum(int(np.prod(merged_grid(config, size))) for size in sizes)
    np.savez(os.path.join(folder, "prompts.npz"), **arrays)
    with open(os.path.join(folder, "transformers.json"), "w") as f:
        json.dump({"tokens": tokens, "image_tokens": counts,
                   "image_span": image_span(config, (24, 40))}, f)


def _genai_inputs(hf_model, ckpt, folder):
    """genai's processor inputs for TWO_IMAGE_PROMPT (on the package built from ``ckpt``)
    and transformers' greedy tokens for the same ids, pixel values and image sizes."""
    import tempfile

    import onnxruntime_genai as og
    from PIL import Image

    import mobius
    from testing.mistral3_checkpoints import hf_mistral3_generate

    with tempfile.TemporaryDirectory() as tmp:
        path = mobius.build(ckpt, execution_provider="cpu", dtype="f32").save(
            os.path.join(tmp, "pkg"))
        images = []
        for i, pixels in enumerate(two_images()):
            images.append(os.path.join(tmp, f"image{i}.png"))
            Image.fromarray(pixels).save(images[-1])
        inputs = og.Model(path).create_multimodal_processor()(TWO_IMAGE_PROMPT,
                                                              images=og.Images.open(*images))
        arrays = {k: inputs[k].as_numpy() for k in ("input_ids", "pixel_values", "image_sizes")}
    input_ids = arrays["input_ids"].astype(np.int64).reshape(1, -1)
    tokens = hf_mistral3_generate(hf_model, input_ids, arrays["pixel_values"],
                                  arrays["image_sizes"], NEW_TOKENS)
    np.savez(os.path.join(folder, "genai_inputs.npz"), tokens=np.array(tokens), **arrays)
