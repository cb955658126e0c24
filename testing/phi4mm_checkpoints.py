"""Tiny Phi-4-multimodal checkpoints and the HD-crop inputs genai's phi4mm processor
makes (crops, canvas sizes, patch masks), written by hand so every case is exact."""

from __future__ import annotations

import numpy as np

from testing.hf_checkpoints import randomize_parameters

CROP, SIDE, BASE = 448, 32, 16  # px per crop, patches per crop side, pooled tokens per side


def make_phi4mm_checkpoint(folder: str, seed: int = 0, vision: dict | None = None,
                           **overrides) -> str:
    """tiny-phi4mm (+ overrides, + vision_config overrides) saved by transformers,
    every parameter random."""
    import torch
    import transformers

    from mobius.tiny.presets import TINY_PRESETS

    preset = TINY_PRESETS["tiny-phi4mm"]
    raw = {**preset, **overrides}
    raw["vision_config"] = {**preset["vision_config"], **(vision or {})}
    raw["audio_config"] = {**preset["audio_config"], **overrides.get("audio_config", {})}
    config = transformers.AutoConfig.for_model(**raw)
    torch.manual_seed(seed)
    model = transformers.Phi4MultimodalForCausalLM(config)
    randomize_parameters(model, seed)
    generator = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():  # the tower's MLP biases start at N(0, 1e-6): as good as zero
        for param in model.parameters():
            if param.numel() > 1 and float(param.std()) < 1e-3:
                param.add_(0.1 * torch.randn(param.shape, generator=generator))
    model.eval().save_pretrained(folder, safe_serialization=True)
    return folder


def load_phi4mm(folder: str):
    """transformers' model with eager attention: its sdpa path makes the vision tower
    causal whenever no patch is padded (the tower is bidirectional)."""
    import torch
    import transformers

    model = transformers.Phi4MultimodalForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def image_mask(rows: int, cols: int, pad_rows: int = 0, pad_cols: int = 0) -> np.ndarray:
    """[1 + rows * cols, SIDE, SIDE]: the global crop's full mask, then the sub-crops'
    (row-major) with the canvas's last ``pad_rows`` / ``pad_cols`` patches padding."""
    canvas = np.ones((rows * SIDE, cols * SIDE), np.float32)
    if pad_rows:
        canvas[-pad_rows:] = 0
    if pad_cols:
        canvas[:, -pad_cols:] = 0
    crops = canvas.reshape(rows, SIDE, cols, SIDE).transpose(0, 2, 1, 3).reshape(-1, SIDE, SIDE)
    return np.concatenate([np.ones((1, SIDE, SIDE), np.float32), crops])


def token_count(mask: np.ndarray, cols: int) -> int:
    """The image's tokens as genai's processor counts them (sub grid rows x (cols + 1),
    1 separator, BASE rows of BASE + 1 global tokens)."""
    sub = mask[1:, ::2, ::2]
    rows = int(sub[::cols, :, 0].sum())
    width = int(sub[:cols, 0, :].sum())
    return rows * (width + 1) + 1 + BASE * (BASE + 1)


def hd_inputs(grids, rng):
    """pixel_values [images, crops, 3, CROP, CROP], image_sizes, image_attention_mask
    (zero-padded to the largest crop count) and each image's token count, for
    ``grids`` = [(rows, cols, pad_rows, pad_cols), ...]."""
    masks = [image_mask(*grid) for grid in grids]
    crops = max(len(m) for m in masks)
    pixels = np.zeros((len(grids), crops, 3, CROP, CROP), np.float32)
    mask = np.zeros((len(grids), crops, SIDE, SIDE), np.float32)
    for i, m in enumerate(masks):
        pixels[i, :len(m)] = rng.standard_normal((len(m), 3, CROP, CROP))
        mask[i, :len(m)] = m
    sizes = np.array([[rows * CROP, cols * CROP] for rows, cols, _, _ in grids], np.int64)
    counts = [token_count(m, grid[1]) for m, grid in zip(masks, grids)]
    return pixels, sizes, mask, counts


#: genai's phi4mm prompt handling: <|image_N|> -> this token (id fixed at 200010 in genai)
GENAI_IMAGE, GENAI_AUDIO = "<|endoftext10|>", "<|endoftext11|>"
GENAI_IMAGE_ID, GENAI_AUDIO_ID = 200010, 200011


def make_genai_phi4mm_checkpoint(folder: str, seed: int = 0) -> str:
    """A checkpoint genai's phi4mm type runs: its vocabulary reaches genai's fixed image
    token id (hidden 32 and a tied head keep it small), and a tiny tokenizer knows
    the image / audio tokens at those ids."""
    import json
    import os

    from mobius.tiny.tokenizer import write_tiny_tokenizer

    make_phi4mm_checkpoint(folder, seed=seed, vision={"image_token_id": GENAI_IMAGE_ID},
                           audio_config={"audio_token_id": GENAI_AUDIO_ID},
                           vocab_size=GENAI_AUDIO_ID + 53, hidden_size=32,
                           num_attention_heads=2, num_key_value_heads=1,
                           intermediate_size=64, tie_word_embeddings=True)
    _scale(folder, {"model.embed_tokens.weight": 10.0, "model.layers.": 10.0,
                    "model.embed_tokens_extend.image_embed.img_projection_": 500.0,
                    "model.embed_tokens_extend.audio_embed.encoder.": 10.0,
                    "model.embed_tokens_extend.audio_embed.up_proj_": 500.0,
                    "model.embed_tokens_extend.audio_embed.down_proj_": 500.0})
    write_tiny_tokenizer(folder, 600)
    path = os.path.join(folder, "tokenizer.json")
    with open(path) as f:
        tokenizer = json.load(f)
    for text, index in ((GENAI_IMAGE, GENAI_IMAGE_ID), (GENAI_AUDIO, GENAI_AUDIO_ID)):
        tokenizer["model"]["vocab"][text] = index
        tokenizer["added_tokens"].append({"id": index, "content": text, "single_word": False,
                                          "lstrip": False, "rstrip": False,
                                          "normalized": False, "special": True})
    with open(path, "w") as f:
        json.dump(tokenizer, f)
    return folder


def _scale(folder: str, factors: dict[str, float]) -> None:
    """Scales the matrices and kernels under each name prefix: transformers' N(0, 0.02) init gives
    a decoder whose greedy tokens ignore the image and the audio (their features,
    averaged over many tokens, vanish next to the text); these factors make the
    tokens depend on them."""
    import os

    from safetensors.numpy import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for name, value in tensors.items():
        factor = next((f for prefix, f in factors.items() if name.startswith(prefix)), None)
        if factor is not None and value.ndim >= 2:
            tensors[name] = value * np.float32(factor)
    save_file(tensors, path, metadata={"format": "pt"})


def audio_inputs(frames: list[int], rng, reduction: int = 8, mel: int = 80):
    """The speech model's feeds for audios of ``frames`` mel frames (zero-padded to the
    longest) and transformers' keyword arguments for them (speech mode)."""
    feats = np.zeros((len(frames), max(frames), mel), np.float32)
    mask = np.zeros(feats.shape[:2], bool)
    for i, n in enumerate(frames):
        feats[i, :n] = rng.standard_normal((n, mel))
        mask[i, :n] = True
    sizes = np.array([-(-n // reduction) for n in frames], np.int64)
    feeds = {"audio_embeds": feats, "audio_attention_mask": mask, "audio_sizes": sizes,
             "audio_projection_mode": np.array([2], np.int64)}
    media = {"audio_input_features": feats, "audio_embed_sizes": sizes,
             "audio_attention_mask": mask}
    return feeds, media
