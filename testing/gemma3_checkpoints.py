"""Tiny Gemma 3 checkpoints that onnxruntime-genai's gemma3 processor can run:
transformers' random model plus a tokenizer that knows Gemma's image tokens and a
Gemma3ImageProcessor config, so both sides' own processors can be compared."""

from __future__ import annotations

import json
import os

import numpy as np

from testing.hf_checkpoints import make_hf_checkpoint

#: transformers zero-initializes the projection (randomize_parameters: 0.1 * N(0, 1));
#: scaled so the image features, and the image tokens' bidirectional attention, steer
#: the greedy tokens
PROJECTOR_SCALE = 8.0
#: Gemma 3's image tokens (the spellings genai's processor and transformers' use)
BOI, IMAGE, EOI = "<start_of_image>", "<image_soft_token>", "<end_of_image>"


def make_gemma3_checkpoint(folder: str, seed: int = 0, **overrides) -> str:
    """tiny-gemma3-vl (+ overrides) saved by transformers, with image tokens in its
    tokenizer at the config's ids and a Gemma3ImageProcessor at the tower's size."""
    from safetensors.numpy import load_file, save_file

    make_hf_checkpoint(folder, "tiny-gemma3-vl", seed=seed, **overrides)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for name, value in tensors.items():
        if "mm_input_projection_weight" in name:  # 0.1 * N(0, 1): image features O(1) instead
            tensors[name] = value * np.float32(PROJECTOR_SCALE)
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    _add_image_tokens(folder, {BOI: config["boi_token_index"], IMAGE: config["image_token_index"],
                               EOI: config["eoi_token_index"]})
    size = config["vision_config"]["image_size"]
    processor = {"image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
                 "do_resize": True, "size": {"height": size, "width": size}, "resample": 2,
                 "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                 "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "do_convert_rgb": True,
                 "do_pan_and_scan": False}
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump(processor, f, indent=2)
    return folder


def _add_image_tokens(folder: str, ids: dict[str, int]) -> None:
    path = os.path.join(folder, "tokenizer.json")
    with open(path) as f:
        tokenizer = json.load(f)
    for text, index in ids.items():  # in the model's vocab too, so the ids are kept
        tokenizer["model"]["vocab"][text] = index
        tokenizer["added_tokens"].append({"id": index, "content": text, "single_word": False,
                                          "lstrip": False, "rstrip": False, "normalized": False,
                                          "special": True})
    with open(path, "w") as f:
        json.dump(tokenizer, f)
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config["extra_special_tokens"] = {"boi_token": BOI, "image_token": IMAGE, "eoi_token": EOI}
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
