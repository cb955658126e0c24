"""transformers' side of gemma4_vl_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per case a tiny-gemma4-mm checkpoint written by transformers with
every parameter random (and every buffer the model reads: layer_scalar, the clip bounds,
std_bias / std_scale), transformers' Gemma 4 image processor's output for two random
images (padded to its patch budget), and transformers' run (testing/vlm_reference.py):
image features, merged embeddings, prefill logits and STEPS greedy steps.
"""

from __future__ import annotations

import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS

PRESET = "tiny-gemma4-mm"
STEPS, PAD = 2, 3
#: two images (height, width) in pixels, resized by the processor within its budget
SIZES = ((24, 40), (20, 12))
MAX_SOFT_TOKENS = 70  # the smallest budget transformers' processor takes
_MM = TINY_PRESETS[PRESET]


def _vision(**edits) -> dict:
    return {"vision_config": {**_MM["vision_config"], **edits}}


#: case: config.json overrides of the preset, each a switch the family reads
OVERRIDES: dict[str, dict] = {
    "default": {},  # 2 x 2 pooling, no clipping or standardizing, causal decoder
    "clipped": _vision(use_clipped_linears=True),
    "standardize": _vision(standardize=True),
    "pool3": _vision(pooling_kernel_size=3),
    "tower_silu": _vision(hidden_activation="silu"),
    "tower_gqa_theta": _vision(num_key_value_heads=1,
                               rope_parameters={"rope_type": "axial", "rope_theta": 10000.0}),
    "bidirectional": {"text_config": {**_MM["text_config"],
                                      "use_bidirectional_attention": "vision"}},
}
#: the genai test's checkpoints: genai case -> its base case, with a tokenizer knowing
#: Gemma 4's image tokens and a preprocessor_config.json at the tiny budget. "genai": the
#: bidirectional decoder (standard Attention, own cache buffers); "genai_causal": the
#: default one (GroupQueryAttention on cpu, past and present sharing genai's buffer)
GENAI = {"genai": "bidirectional", "genai_causal": "default"}
NEW_TOKENS = 8
TOKENS = {"boi_token_id": "<|image>", "image_token_id": "<|image|>", "eoi_token_id": "<image|>"}
#: the audio case: the default checkpoint, a prompt with one clip of AUDIO_FRAMES log-mel
#: frames (no image); its features, prefill logits and NEW_TOKENS greedy tokens
AUDIO, AUDIO_FRAMES, AUDIO_SEED = "audio", 30, 2
#: the audio case's audio.wav (16 kHz, 16 bit: a tone in noise, quiet at the end) and
#: transformers' Gemma4AudioFeatureExtractor log-mel of it at each of MEL_SIZES bins (the
#: checkpoint's, and Gemma 4's released 128) in log_mel.npz
WAVE_SAMPLES, MEL_SIZES = 9_611, (8, 128)
CASES = [*sorted(OVERRIDES), *sorted(GENAI), AUDIO]


def _random_buffers(ckpt: str) -> None:
    """The buffers transformers starts at constants made random: layer_scalar around 1,
    clip bounds around -/+1 (so they bind), std_bias around 0 and std_scale around 1."""
    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(ckpt, "model.safetensors")
    tensors = load_file(path)
    gen = torch.Generator().manual_seed(11)
    for name in sorted(tensors):
        shape = tensors[name].shape
        noise = 0.2 * torch.randn(shape, generator=gen)
        if name.endswith(".layer_scalar") or name.endswith("std_scale"):
            tensors[name] = 1 + noise
        elif name.endswith("std_bias"):
            tensors[name] = noise
        elif name.endswith(("_min", "_max")):
            sign = -1.0 if name.endswith("_min") else 1.0
            tensors[name] = sign * (0.8 + noise.abs())
    save_file(tensors, path, metadata={"format": "pt"})


def processor(config):
    from transformers.models.gemma4.image_processing_pil_gemma4 import (
        Gemma4ImageProcessorPil as Gemma4ImageProcessor)

    vision = config.vision_config
    return Gemma4ImageProcessor(patch_size=vision.patch_size, max_soft_tokens=MAX_SOFT_TOKENS,
                                pooling_kernel_size=vision.pooling_kernel_size)


def _inputs(config, seed: int) -> dict:
    """Row 0: text, image 0, text; row 1 (left-padded by PAD): text, image 1, text."""
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, size=(*size, 3), dtype=np.uint8) for size in SIZES]
    out = processor(config)(images=images, return_tensors="np")
    counts = [int(n) for n in out["num_soft_tokens_per_image"]]
    image = config.image_token_id
    text = lambda n: [int(t) for t in rng.integers(4, image - 8, size=n)]  # noqa: E731
    span = lambda n: [config.boi_token_id, *[image] * n, config.eoi_token_id]  # noqa: E731
    row0 = text(2) + span(counts[0]) + text(3)
    row1 = text(1) + span(counts[1])
    row1 = [0] * PAD + row1 + text(len(row0) - PAD - len(row1))
    input_ids = np.array([row0, row1], dtype=np.int64)
    mask = np.ones_like(input_ids)
    mask[1, :PAD] = 0
    return {"input_ids": input_ids, "attention_mask": mask,
            "pixel_values": out["pixel_values"].astype(np.float32),
            "image_position_ids": out["image_position_ids"].astype(np.int64),
            "mm_token_type_ids": (input_ids == image).astype(np.int64)}


def _record(hf_model, path: str) -> None:
    import torch

    from testing import vlm_reference

    inputs = _inputs(hf_model.config, 0)
    with torch.no_grad():
        features = torch.cat(hf_model.model.get_image_features(
            torch.from_numpy(inputs["pixel_values"]),
            torch.from_numpy(inputs["image_position_ids"])).pooler_output)
    vlm_reference.record_image_run(
        hf_model, inputs, ("pixel_values", "image_position_ids", "mm_token_type_ids"),
        features, STEPS, path, image_token_id=hf_model.config.image_token_id)


def _genai_files(ckpt: str) -> None:
    """Image tokens in tokenizer.json at the config's ids; the processor's budget."""
    import json

    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    path = os.path.join(ckpt, "tokenizer.json")
    with open(path) as f:
        tokenizer = json.load(f)
    for key, text in TOKENS.items():
        tokenizer["model"]["vocab"][text] = config[key]
        tokenizer["added_tokens"].append({"id": config[key], "content": text, "special": True,
                                          "single_word": False, "lstrip": False,
                                          "rstrip": False, "normalized": False})
    with open(path, "w") as f:
        json.dump(tokenizer, f)
    vision = config["vision_config"]
    with open(os.path.join(ckpt, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Gemma4ImageProcessor",
                   "patch_size": vision["patch_size"], "max_soft_tokens": MAX_SOFT_TOKENS,
                   "pooling_kernel_size": vision["pooling_kernel_size"]}, f)


def _record_genai(hf_model, folder: str) -> None:
    """image.png, and transformers' processor output for it, prompt and greedy tokens."""
    from PIL import Image

    from testing import vlm_reference

    rng = np.random.default_rng(8)  # a varied continuation, no eos
    path = os.path.join(folder, "image.png")
    Image.fromarray(rng.integers(0, 256, size=(*SIZES[0], 3), dtype=np.uint8)).save(path)
    out = processor(hf_model.config)(images=Image.open(path), return_tensors="np")
    config = hf_model.config
    count = int(out["num_soft_tokens_per_image"][0])
    ids = [int(t) for t in rng.integers(4, config.image_token_id - 8, size=5)]
    ids = ids[:3] + [config.boi_token_id, *[config.image_token_id] * count,
                     config.eoi_token_id] + ids[3:]
    input_ids = np.array([ids], np.int64)
    prefill = {"input_ids": input_ids, "pixel_values": out["pixel_values"].astype(np.float32),
               "image_position_ids": out["image_position_ids"].astype(np.int64),
               "mm_token_type_ids": (input_ids == config.image_token_id).astype(np.int64)}
    _, tokens = vlm_reference.greedy(hf_model, prefill, np.ones_like(input_ids), NEW_TOKENS)
    np.savez(os.path.join(folder, "genai.npz"), **prefill, count=count,
             tokens=np.concatenate(tokens, axis=1))


def _record_audio(hf_model, path: str) -> None:
    """text, <boa>, the clip's audio tokens, <eoa>, text; transformers' real audio soft
    tokens, logits and greedy tokens."""
    import torch

    from testing import vlm_reference

    config, rng = hf_model.config, np.random.default_rng(AUDIO_SEED)
    mel = config.audio_config.subsampling_conv_channels[0] // 4 * 4
    features = rng.standard_normal((1, AUDIO_FRAMES, mel)).astype(np.float32)
    mask = np.ones((1, AUDIO_FRAMES), bool)
    count = (AUDIO_FRAMES + 3) // 4
    def text(n):
        return [int(t) for t in rng.integers(4, config.image_token_id - 8, size=n)]

    ids = text(2) + [config.boa_token_id, *[config.audio_token_id] * count,
                     config.eoa_token_index] + text(3)
    input_ids = np.array([ids], np.int64)
    with torch.no_grad():
        out = hf_model.model.get_audio_features(torch.from_numpy(features),
                                                torch.from_numpy(mask))
        tokens = out.pooler_output[out.attention_mask].numpy()
    prefill = {"input_ids": input_ids, "input_features": features,
               "input_features_mask": mask}
    logits, steps = vlm_reference.greedy(hf_model, prefill, np.ones_like(input_ids),
                                         NEW_TOKENS)
    np.savez(path, **prefill, features=tokens, logits=logits[0],
             tokens=np.concatenate(steps, axis=1))


def _record_log_mel(folder: str) -> None:
    """audio.wav and transformers' log-mel features and frame mask of it per MEL_SIZES."""
    import wave

    from transformers.models.gemma4.feature_extraction_gemma4 import (
        Gemma4AudioFeatureExtractor)

    rng = np.random.default_rng(AUDIO_SEED)
    time = np.arange(WAVE_SAMPLES) / 16_000
    level = np.where(time < 0.45, 0.4, 0.004)
    signal = level * (np.sin(2 * np.pi * 440 * time) + 0.3 * rng.standard_normal(WAVE_SAMPLES))
    pcm = np.clip(signal * 32767, -32768, 32767).astype(np.int16)
    with wave.open(os.path.join(folder, "audio.wav"), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16_000)
        f.writeframes(pcm.tobytes())
    arrays = {}
    for size in MEL_SIZES:
        out = Gemma4AudioFeatureExtractor(feature_size=size)(
            [pcm.astype(np.float32) / 32768], return_tensors="np")
        arrays[f"mel{size}"] = out["input_features"][0]
        arrays[f"mask{size}"] = out["input_features_mask"][0]
    np.savez(os.path.join(folder, "log_mel.npz"), **arrays)


def write_case(case: str, folder: str) -> None:
    """ckpt/ and run.npz (GENAI cases: ckpt/ with genai's files, image.png, genai.npz;
    AUDIO: ckpt/, audio.npz, audio.wav and log_mel.npz)."""
    from testing.hf_checkpoints import load_hf_model
    from testing.random_checkpoint import random_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    random_checkpoint(ckpt, PRESET, **OVERRIDES[GENAI.get(case, "default" if case == AUDIO
                                                          else case)])
    _random_buffers(ckpt)
    if case == AUDIO:
        _record_audio(load_hf_model(ckpt), os.path.join(folder, "audio.npz"))
        _record_log_mel(folder)
        return
    if case in GENAI:
        _genai_files(ckpt)
        _record_genai(load_hf_model(ckpt), folder)
        return
    _record(load_hf_model(ckpt), os.path.join(folder, "run.npz"))
