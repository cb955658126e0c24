"""transformers' side of gemma4_unified_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a tiny-gemma4-unified checkpoint written by
transformers with every parameter random (layer_scalar too), two images' merged patches
as its processor lays them out (row-major (x, y) positions, the smaller image padded with
(-1, -1)), and transformers' run (testing/vlm_reference.py): image features, merged
embeddings, prefill logits and STEPS greedy steps.
"""

from __future__ import annotations

import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS

PRESET = "tiny-gemma4-unified"
STEPS, PAD = 2, 3
#: two images' grids of model patches (columns, rows)
GRIDS = ((3, 2), (2, 2))
_MM = TINY_PRESETS[PRESET]


def _text(**edits) -> dict:
    return {"text_config": {**_MM["text_config"], **edits}}


#: case: config.json overrides of the preset, each a switch the family reads
OVERRIDES: dict[str, dict] = {
    "default": {},  # bidirectional image spans, 2 x 2 merges
    "causal": _text(use_bidirectional_attention=None),
    "pool3": {"vision_config": {**_MM["vision_config"], "pooling_kernel_size": 3}},
    # the decoder's switches the preset sets, off: V projected, no KV sharing, no cap
    "plain": _text(attention_k_eq_v=False, num_kv_shared_layers=0, use_double_wide_mlp=False,
                   final_logit_softcapping=None),
}
#: the genai test's checkpoint: genai case -> its base case; GENAI_SEED's prompt has a
#: varied greedy continuation (no eos)
GENAI = {"genai": "default"}
GENAI_SEED, NEW_TOKENS = 5, 8
#: the audio case: the default checkpoint with audio_config rms_norm_eps AUDIO_EPS (the
#: quiet clip's mean square is below it, so it matters); row 0: text, image 0, text, a
#: loud clip, text; row 1 (left-padded by PAD): text, a quiet clip, text. Clips in samples
#: (the first ends mid-frame, the second is padded by transformers to the first's frames)
AUDIO, AUDIO_EPS, AUDIO_SEED = "audio", 0.05, 3
CLIPS, LOUDNESS = (24 * 6 + 7, 24 * 4), (0.8, 0.03)
#: the genai audio case: the default checkpoint, one prompt with one clip of GENAI_SAMPLES
#: samples written as audio.wav (16 bit), its frames and transformers' greedy tokens
GENAI_AUDIO, GENAI_SAMPLES = "genai_audio", 24 * 9 + 11
#: the genai image case: the default checkpoint with a preprocessor_config.json (IMAGE_SOFT
#: tokens: its tiles' positions stay within the preset's table) and the media markers in
#: its tokenizer; IMAGES (name -> (height, width); "exact" needs no resize) written as
#: PNGs, the reference's pixel inputs of each and transformers' Pillow processor's, and
#: transformers' greedy tokens for genai's expansion of IMAGE_PROMPT (the resized image)
#: and AUDIO_PROMPT (that image and a GENAI_SAMPLES clip, audio.wav)
GENAI_IMAGE, IMAGE_SOFT = "genai_image", 70
IMAGES = {"resized": (37, 53), "exact": (24, 40)}
IMAGE_PROMPT, AUDIO_PROMPT = "Look: <|image|> then", "Look: <|image|> then <|audio|>"
CASES = [*sorted(OVERRIDES), *sorted(GENAI), AUDIO, GENAI_AUDIO, GENAI_IMAGE]


def random_layer_scalars(ckpt: str) -> None:
    """layer_scalar (transformers starts it at 1) made random around 1."""
    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(ckpt, "model.safetensors")
    tensors = load_file(path)
    gen = torch.Generator().manual_seed(11)
    for name in sorted(tensors):
        if name.endswith(".layer_scalar"):
            tensors[name] = 1 + 0.2 * torch.randn(tensors[name].shape, generator=gen)
    save_file(tensors, path, metadata={"format": "pt"})


def patches(config, rng) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """pixel_values [2, most patches, 3 * model_patch^2] in [0, 1], positions, counts."""
    vision = config.vision_config
    width = 3 * (vision.patch_size * vision.pooling_kernel_size) ** 2
    most = max(c * r for c, r in GRIDS)
    pixels = rng.random((len(GRIDS), most, width), dtype=np.float32)
    positions = np.full((len(GRIDS), most, 2), -1, np.int64)
    for i, (columns, rows) in enumerate(GRIDS):
        grid = [(x, y) for y in range(rows) for x in range(columns)]
        positions[i, :len(grid)] = grid
        pixels[i, len(grid):] = 0.0
    return pixels, positions, [c * r for c, r in GRIDS]


def _inputs(config, seed: int) -> dict:
    """Row 0: text, image 0, text; row 1 (left-padded by PAD): text, image 1, text."""
    rng = np.random.default_rng(seed)
    pixels, positions, counts = patches(config, rng)
    image = config.image_token_id
    text = lambda n: [int(t) for t in rng.integers(4, image - 8, size=n)]  # noqa: E731
    span = lambda n: [config.boi_token_id, *[image] * n, config.eoi_token_id]  # noqa: E731
    row0 = text(2) + span(counts[0]) + text(3)
    row1 = text(1) + span(counts[1])
    row1 = [0] * PAD + row1 + text(len(row0) - PAD - len(row1))
    input_ids = np.array([row0, row1], dtype=np.int64)
    mask = np.ones_like(input_ids)
    mask[1, :PAD] = 0
    return {"input_ids": input_ids, "attention_mask": mask, "pixel_values": pixels,
            "image_position_ids": positions,
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


def _record_genai(hf_model, path: str) -> None:
    """Row 0 of GENAI_SEED's batch (one image, its real patches) and its greedy tokens."""
    from testing import vlm_reference

    inputs = _inputs(hf_model.config, GENAI_SEED)
    ids = inputs["input_ids"][:1]
    count = int((ids == hf_model.config.image_token_id).sum())
    prefill = {"input_ids": ids, "pixel_values": inputs["pixel_values"][:1, :count],
               "image_position_ids": inputs["image_position_ids"][:1, :count],
               "mm_token_type_ids": inputs["mm_token_type_ids"][:1]}
    _, tokens = vlm_reference.greedy(hf_model, prefill, np.ones_like(ids), NEW_TOKENS)
    np.savez(path, **prefill, count=count, tokens=np.concatenate(tokens, axis=1))


def write_case(case: str, folder: str) -> None:
    """ckpt/ and run.npz (GENAI cases: ckpt/ and genai.npz; AUDIO: ckpt/ and audio.npz;
    GENAI_AUDIO: ckpt/, audio.wav and genai_audio.npz)."""
    from testing.hf_checkpoints import load_hf_model
    from testing.random_checkpoint import random_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    if case in (AUDIO, GENAI_AUDIO):
        _write_audio_case(case, folder)
        return
    if case == GENAI_IMAGE:
        _write_genai_image_case(folder)
        return
    random_checkpoint(ckpt, PRESET, **OVERRIDES[GENAI.get(case, case)])
    random_layer_scalars(ckpt)
    if case in GENAI:
        _record_genai(load_hf_model(ckpt), os.path.join(folder, "genai.npz"))
        return
    _record(load_hf_model(ckpt), os.path.join(folder, "run.npz"))


def _frames(hf_model, waves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """transformers' Gemma4UnifiedAudioFeatureExtractor: (frames, mask) of the clips."""
    from transformers.models.gemma4_unified.feature_extraction_gemma4_unified import (
        Gemma4UnifiedAudioFeatureExtractor)

    size = hf_model.config.audio_config.audio_embed_dim
    out = Gemma4UnifiedAudioFeatureExtractor(feature_size=size, audio_samples_per_token=size)(
        waves, return_tensors="np")
    return out["input_features"].astype(np.float32), out["input_features_mask"]


def _audio_inputs(hf_model, rng) -> dict:
    """AUDIO's batch (see CLIPS): image 0 in row 0, one clip a row."""
    config = hf_model.config
    pixels, positions, counts = patches(config, rng)
    waves = [level * rng.uniform(-1, 1, n).astype(np.float32)
             for n, level in zip(CLIPS, LOUDNESS)]
    frames, frames_mask = _frames(hf_model, waves)
    def text(n):
        return [int(t) for t in rng.integers(4, config.image_token_id - 8, size=n)]

    def clip(i):
        count = int(frames_mask[i].sum())
        return [config.boa_token_id, *[config.audio_token_id] * count, config.eoa_token_index]

    row0 = (text(2) + [config.boi_token_id, *[config.image_token_id] * counts[0],
                       config.eoi_token_id] + text(1) + clip(0) + text(2))
    row1 = text(1) + clip(1)
    row1 = [0] * PAD + row1 + text(len(row0) - PAD - len(row1))
    ids = np.array([row0, row1], dtype=np.int64)
    mask = np.ones_like(ids)
    mask[1, :PAD] = 0
    kinds = np.where(ids == config.image_token_id, 1, 0)
    kinds = np.where(ids == config.audio_token_id, 3, kinds)
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": pixels[:1, :counts[0]],
            "image_position_ids": positions[:1, :counts[0]], "input_features": frames,
            "input_features_mask": frames_mask, "mm_token_type_ids": kinds}


def _record_audio(hf_model, path: str) -> None:
    """transformers' image and real audio soft tokens, their merge into the token
    embeddings, prefill logits and STEPS greedy steps."""
    import torch

    from testing import parity, vlm_reference

    inputs = _audio_inputs(hf_model, np.random.default_rng(AUDIO_SEED))
    config, model = hf_model.config, hf_model.model
    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    with torch.no_grad():
        image = torch.cat(model.get_image_features(
            t["pixel_values"], t["image_position_ids"]).pooler_output)
        out = model.get_audio_features(t["input_features"], t["input_features_mask"])
        audio = out.pooler_output[out.attention_mask]
        embeds = hf_model.get_input_embeddings()(t["input_ids"])
        merged = embeds.masked_scatter(
            (t["input_ids"] == config.image_token_id)[..., None].expand_as(embeds), image)
        merged = merged.masked_scatter(
            (t["input_ids"] == config.audio_token_id)[..., None].expand_as(embeds), audio)
    mask = inputs["attention_mask"]
    prefill = {k: v for k, v in inputs.items() if k != "attention_mask"}
    prefill["position_ids"] = parity.position_ids_for(mask, mask.shape[1])
    logits, tokens = vlm_reference.greedy(hf_model, prefill, mask, STEPS,
                                          lambda step, m: parity.position_ids_for(m, 1))
    vlm_reference.save(path, {**inputs, "features": image.numpy(), "audio": audio.numpy(),
                              "merged": merged.numpy()}, logits, tokens)


def write_wav(hf_model, rng, path: str) -> tuple[np.ndarray, np.ndarray]:
    """A GENAI_SAMPLES clip as 16 bit mono 16 kHz ``path``: transformers' (frames, mask)."""
    import wave

    pcm = (rng.uniform(-0.6, 0.6, GENAI_SAMPLES) * 32767).astype(np.int16)
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16_000)
        f.writeframes(pcm.tobytes())
    return _frames(hf_model, [pcm.astype(np.float32) / 32768])


def _record_genai_audio(hf_model, folder: str) -> None:
    """audio.wav (16 bit), transformers' frames of the waveform it holds, a prompt with
    the clip's tokens and transformers' greedy tokens."""
    from testing import vlm_reference

    config, rng = hf_model.config, np.random.default_rng(GENAI_SEED)
    frames, mask = write_wav(hf_model, rng, os.path.join(folder, "audio.wav"))
    ids = [int(t) for t in rng.integers(4, config.image_token_id - 8, size=5)]
    ids = ids[:2] + [config.boa_token_id, *[config.audio_token_id] * int(mask.sum()),
                     config.eoa_token_index] + ids[2:]
    input_ids = np.array([ids], np.int64)
    prefill = {"input_ids": input_ids, "input_features": frames, "input_features_mask": mask,
               "mm_token_type_ids": np.where(input_ids == config.audio_token_id, 3, 0)}
    _, tokens = vlm_reference.greedy(hf_model, prefill, np.ones_like(input_ids), NEW_TOKENS)
    np.savez(os.path.join(folder, "genai_audio.npz"), **prefill,
             tokens=np.concatenate(tokens, axis=1))


def _write_audio_case(case: str, folder: str) -> None:
    from testing.hf_checkpoints import load_hf_model
    from testing.random_checkpoint import random_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    edit = ({"audio_config": {**_MM["audio_config"], "rms_norm_eps": AUDIO_EPS}}
            if case == AUDIO else {})
    random_checkpoint(ckpt, PRESET, **edit)
    random_layer_scalars(ckpt)
    if case == AUDIO:
        _record_audio(load_hf_model(ckpt), os.path.join(folder, "audio.npz"))
    else:
        _record_genai_audio(load_hf_model(ckpt), folder)


def _genai_image_inputs(hf_model, folder: str) -> dict:
    """IMAGES as PNGs; per image the reference's pixel inputs (testing/gemma4_unified_image)
    and transformers' Pillow processor's at the merged side with a kernel of 1."""
    from PIL import Image
    from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

    from testing.gemma4_unified_image import pixel_inputs, smooth_image

    vision = hf_model.config.vision_config
    side = vision.patch_size * vision.pooling_kernel_size
    pil = Gemma4ImageProcessorPil(patch_size=side, pooling_kernel_size=1,
                                  max_soft_tokens=IMAGE_SOFT)
    rng, out = np.random.default_rng(GENAI_SEED), {}
    for name, size in IMAGES.items():
        path = os.path.join(folder, f"{name}.png")
        Image.fromarray(smooth_image(rng, *size)).save(path)
        with Image.open(path) as image:
            pixels, positions, count = pixel_inputs(np.asarray(image.convert("RGB")), side,
                                                    IMAGE_SOFT)
            theirs = pil(image, return_tensors="np")
        out.update({f"{name}_pixel_values": pixels, f"{name}_positions": positions,
                    f"{name}_count": count, f"{name}_pil_pixel_values": theirs["pixel_values"][0],
                    f"{name}_pil_positions": theirs["image_position_ids"][0]})
    return out


def _write_genai_image_case(folder: str) -> None:
    """ckpt/ (preprocessor_config.json, media markers), the PNGs, audio.wav and image.npz:
    the pixel inputs and, per prompt, its ids as genai expands it, transformers' prefill
    logits and greedy tokens."""
    import json

    from tokenizers import Tokenizer

    from testing import vlm_reference
    from testing.gemma4_genai_prompt import add_media_tokens, expanded
    from testing.hf_checkpoints import load_hf_model
    from testing.random_checkpoint import random_checkpoint

    ckpt = os.path.join(folder, "ckpt")
    random_checkpoint(ckpt, PRESET)
    random_layer_scalars(ckpt)
    add_media_tokens(ckpt)
    vision = _MM["vision_config"]
    with open(os.path.join(ckpt, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Gemma4UnifiedImageProcessor",
                   "patch_size": vision["patch_size"], "max_soft_tokens": IMAGE_SOFT,
                   "pooling_kernel_size": vision["pooling_kernel_size"], "do_resize": True,
                   "resample": 3, "do_rescale": True, "rescale_factor": 1 / 255,
                   "do_normalize": False}, f)
    hf_model = load_hf_model(ckpt)
    config, tokenizer = hf_model.config, Tokenizer.from_file(os.path.join(ckpt, "tokenizer.json"))
    out = _genai_image_inputs(hf_model, folder)
    frames, mask = write_wav(hf_model, np.random.default_rng(GENAI_SEED), os.path.join(
        folder, "audio.wav"))
    count = out["resized_count"]
    image = {"pixel_values": out["resized_pixel_values"][None, :count],
             "image_position_ids": out["resized_positions"][None, :count]}
    for name, prompt, audio in (("image", IMAGE_PROMPT, 0),
                                ("image_audio", AUDIO_PROMPT, int(mask.sum()))):
        ids = np.array([tokenizer.encode(expanded(prompt, count, audio)).ids], np.int64)
        kinds = np.where(ids == config.image_token_id, 1, 0)
        prefill = {"input_ids": ids, **image,
                   "mm_token_type_ids": np.where(ids == config.audio_token_id, 3, kinds)}
        if audio:
            prefill.update(input_features=frames, input_features_mask=mask)
        logits, tokens = vlm_reference.greedy(hf_model, prefill, np.ones_like(ids), NEW_TOKENS)
        out.update({f"{name}_ids": ids, f"{name}_tokens": np.concatenate(tokens, axis=1),
                    f"{name}_logits": logits[0]})
    np.savez(os.path.join(folder, "image.npz"), **out)
