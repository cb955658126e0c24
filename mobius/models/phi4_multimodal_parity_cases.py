"""transformers' side of phi4_multimodal_parity_test (the reference_cases rule runs it at
build time, //rules:references.bzl): per case a checkpoint (ckpt/) and reference.npz
(testing/vlm_reference.py): the batch, transformers' merged embeddings, and its logits
and greedy tokens over STEPS decode steps. "vision_lora" adds the random PEFT LoRA
(adapter/), its reference from peft's merge and lora.json (the modules peft targeted).
"""

from __future__ import annotations

import json
import os

import numpy as np

STEPS, PAD = 3, 3
GRIDS = [(1, 2, 0, 5), (2, 1, 7, 0), (1, 1, 0, 0)]  # (rows, cols, padded rows, padded cols)

_LONGROPE = {"rope_parameters": {
    "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
    "short_factor": [1.0 + 0.1 * i for i in range(6)],
    "long_factor": [2.0 + 0.5 * i for i in range(6)]},
    "original_max_position_embeddings": 512}

#: image case: (checkpoint overrides, vision_config overrides)
IMAGE_CASES = {
    "default": ({}, {}),
    # both tower layers; exact-GELU tower MLPs
    "feature_layer_last": ({}, {"feature_layer": -1, "hidden_act": "gelu"}),
    "longrope_long_prompt": (_LONGROPE, {}),  # prompts past 512: the long factors
    "sliding_window": ({"sliding_window": 200}, {}),  # prompts of ~1500 tokens
    "full_rotary_tied": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
                          "tie_word_embeddings": True}, {}),
}

_AUDIO_VARIANTS = {  # every switch of the speech path off its default
    "chunk_size": 4, "left_chunk": 1, "bias_symmetric": True, "bias_max_distance": 50,
    "kernel_size": 5, "depthwise_multiplier": 2, "time_reduction": 4, "activation": "gelu",
    "conv_activation": "relu", "conv_glu_type": "silu", "nemo_activation": "silu"}
#: audio case: (audio_config overrides, mel frames per row, with an image in row 0)
AUDIO_CASES = {
    "speech": ({}, [100, 70], False),
    "speech_variants": (_AUDIO_VARIANTS, [100, 70], False),
    "speech_past_500_positions": ({}, [4100], False),  # 2 chunks (transformers: 1 audio)
    "image_and_speech": ({}, [100, 70], True),  # the vision-speech projections
}

# the decoder projections the released vision-lora / speech-lora folders target (the
# tower and speech encoder keep their own Linears); a regex as PEFT matches it
LORA_TARGETS = r"model\.layers\.\d+\.(self_attn\.(qkv|o)_proj|mlp\.(gate_up|down)_proj)"

CASES = [*sorted(IMAGE_CASES), *sorted(AUDIO_CASES), "vision_lora"]


def write_case(case: str, folder: str) -> None:
    from testing.phi4mm_checkpoints import load_phi4mm, make_phi4mm_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    if case in AUDIO_CASES:
        make_phi4mm_checkpoint(ckpt, audio_config=AUDIO_CASES[case][0])
        model = load_phi4mm(ckpt)
        _record(model, *_audio_batch(model, case), folder)
        return
    overrides, vision = IMAGE_CASES["default" if case == "vision_lora" else case]
    make_phi4mm_checkpoint(ckpt, vision=vision, **overrides)
    model = load_phi4mm(ckpt)
    if case == "vision_lora":
        model = _lora(model, folder)
    _record(model, *_image_batch(model), folder)


def _image_batch(hf_model, seed=0):
    """Row 0 holds the first two GRIDS images, row 1 the third, left-padded by PAD."""
    from testing.phi4mm_checkpoints import hd_inputs

    rng = np.random.default_rng(seed)
    pixels, sizes, mask, counts = hd_inputs(GRIDS, rng)
    image = hf_model.config.vision_config.image_token_id
    text = lambda n: [int(t) for t in rng.integers(3, image - 2, size=n)]  # noqa: E731
    row0 = text(2) + [image] * counts[0] + text(1) + [image] * counts[1] + text(2)
    row1 = [0] * PAD + text(2) + [image] * counts[2] + text(len(row0) - PAD - 2 - counts[2])
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :PAD] = 0
    images = {"pixels": pixels, "sizes": sizes, "mask": mask}
    return input_ids, attention_mask, images, {}, _image_media(pixels, sizes, mask)


def _image_media(pixels, sizes, mask):
    return {"image_pixel_values": pixels, "image_sizes": sizes, "image_attention_mask": mask}


def _audio_batch(hf_model, case):
    """Row i holds audio i (row 0 also the image's tokens), rows after 0 left-padded."""
    from testing.phi4mm_checkpoints import audio_inputs, hd_inputs

    _, frames, with_image = AUDIO_CASES[case]
    config = hf_model.config
    rng = np.random.default_rng(1)
    feeds, media = audio_inputs(frames, rng, config.audio_config.time_reduction)
    images, counts = {}, []
    if with_image:
        pixels, sizes, mask, counts = hd_inputs([(1, 1, 0, 0)], rng)
        images = {"pixels": pixels, "sizes": sizes, "mask": mask}
        media.update(_image_media(pixels, sizes, mask))
        feeds["audio_projection_mode"] = np.array([3], np.int64)  # genai: vision + speech
    image, audio = config.vision_config.image_token_id, config.audio_config.audio_token_id
    text = lambda n: [int(t) for t in rng.integers(3, image - 2, size=n)]  # noqa: E731
    sizes = list(feeds["audio_sizes"])
    rows = [text(2) + [image] * sum(counts) + text(1) + [audio] * sizes[0] + text(2)]
    for count in sizes[1:]:
        rows.append([0] * PAD + text(2) + [audio] * count)
    width = max(len(r) for r in rows)
    rows = [r + text(width - len(r)) for r in rows]
    input_ids = np.array(rows, dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1:, :PAD] = 0
    return input_ids, attention_mask, images, feeds, media


def _record(hf_model, input_ids, attention_mask, images, feeds, media, folder):
    """reference.npz: the batch (images, "feed.*": the speech model's feeds), transformers'
    merged embeddings ("merged"), its logits and greedy tokens."""
    import torch

    from testing import vlm_reference
    from testing.parity import position_ids_for

    ids = torch.from_numpy(input_ids)
    body = hf_model.model
    with torch.no_grad():
        merged = body.embed_tokens_extend(ids, body.embed_tokens(ids), **{
            k: torch.from_numpy(v) for k, v in media.items()})
    prefill = {"input_ids": input_ids, **media,
               "position_ids": position_ids_for(attention_mask, input_ids.shape[1])}
    logits, tokens = vlm_reference.greedy(hf_model, prefill, attention_mask, STEPS,
                                          lambda step, mask: position_ids_for(mask, 1))
    arrays = {"input_ids": input_ids, "attention_mask": attention_mask, **images,
              "merged": merged.numpy(),
              "image_token_id": np.int64(hf_model.config.vision_config.image_token_id),
              **{f"feed.{k}": v for k, v in feeds.items()}}
    vlm_reference.save(os.path.join(folder, "reference.npz"), arrays, logits, tokens)


def _lora(base_model, folder):
    """A random LoRA (A and B random, not peft's zero B, so the adapter matters) on the
    decoder projections, saved to adapter/: peft's merged model."""
    import peft
    import torch

    torch.manual_seed(5)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS,
                             init_lora_weights=False)
    with_lora = peft.get_peft_model(base_model, config)
    with open(os.path.join(folder, "lora.json"), "w") as f:
        json.dump({"targeted": len(with_lora.base_model.targeted_module_names)}, f)
    with_lora.save_pretrained(os.path.join(folder, "adapter"))
    return with_lora.merge_and_unload().eval()
