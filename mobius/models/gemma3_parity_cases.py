"""transformers' side of gemma3_parity_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per case a checkpoint (ckpt/) and reference.npz
(testing/vlm_reference.py): the batch, transformers' features, merged embeddings, logits
and greedy tokens, and "causal.<step>": its logits on the same tokens without
token_type_ids (the image blocks attending causally).
"""

from __future__ import annotations

import os

import numpy as np

STEPS, PAD = 3, 3

_GEMMA3_4X_TEXT = {  # transformers 4.x spellings: one rope_theta + rope_local_base_freq,
    "rope_parameters": None, "rope_theta": 50000.0, "rope_local_base_freq": 500.0,  # linear
    "rope_scaling": {"rope_type": "linear", "factor": 2.0},  # scaling on global layers only
    "layer_types": None, "sliding_window_pattern": 2, "sliding_window": 9,
}

#: name: (tiny-gemma3-vl overrides, text_config overrides)
OVERRIDES = {
    "pooled_16_tokens": ({"mm_tokens_per_image": 16}, {}),  # 16 x 16 patches -> 4 x 4 tokens
    "unpooled_256_tokens": ({}, {"max_position_embeddings": 1024}),  # genai's token count
    "gemma3_4x_text_config": ({"mm_tokens_per_image": 64}, _GEMMA3_4X_TEXT),
    "untied_head": ({"mm_tokens_per_image": 16, "tie_word_embeddings": False},
                    {"tie_word_embeddings": False}),
}
CASES = sorted(OVERRIDES)


def write_case(case: str, folder: str) -> None:
    from mobius.tiny.presets import TINY_PRESETS
    from testing.gemma3_checkpoints import make_gemma3_checkpoint
    from testing.hf_checkpoints import load_hf_model

    overrides, text = OVERRIDES[case]
    text_config = {**TINY_PRESETS["tiny-gemma3-vl"]["text_config"], **text}
    text_config = {k: v for k, v in text_config.items() if v is not None}
    ckpt = os.path.join(folder, "ckpt")
    make_gemma3_checkpoint(ckpt, text_config=text_config, **overrides)
    _record(load_hf_model(ckpt), os.path.join(folder, "reference.npz"))


def _inputs(config, seed=0) -> dict:
    """Row 0: two images, row 1: one image, left-padded by PAD; their pixel_values."""
    vision, image = config.vision_config, config.image_token_index
    tokens = config.mm_tokens_per_image
    rng = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in rng.integers(4, config.boi_token_index, size=n)]  # noqa: E731
    row0 = text(2) + [image] * tokens + text(1) + [image] * tokens + text(2)
    row1 = [0] * PAD + text(2) + [image] * tokens + text(len(row0) - PAD - 2 - tokens)
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :PAD] = 0
    pixel_values = rng.standard_normal((3, vision.num_channels, vision.image_size,
                                        vision.image_size)).astype(np.float32)
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "pixel_values": pixel_values}


def _record(hf_model, path):
    import torch

    from testing import vlm_reference
    from testing.parity import position_ids_for

    inputs = _inputs(hf_model.config)
    with torch.no_grad():
        features = hf_model.model.get_image_features(
            pixel_values=torch.from_numpy(inputs["pixel_values"])).pooler_output
        features = features.reshape(-1, features.shape[-1])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    types = (ids == hf_model.config.image_token_index).astype(np.int64)
    _, tokens = vlm_reference.record_image_run(hf_model, inputs, ("pixel_values",), features,
                                               STEPS, path, token_type_ids=types)
    prefill = {"input_ids": ids, "pixel_values": inputs["pixel_values"],
               "position_ids": position_ids_for(mask, ids.shape[1])}
    causal, _ = vlm_reference.greedy(hf_model, prefill, mask, STEPS,
                                     lambda step, m: position_ids_for(m, 1), tokens)
    ref = vlm_reference.load(path)
    vlm_reference.save(path, {**ref.arrays, **{f"causal.{i}": x for i, x in enumerate(causal)}},
                       ref.logits, ref.tokens)
