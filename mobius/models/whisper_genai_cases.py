"""transformers' side of whisper_genai_test (the reference_cases rule runs it at build time,
//rules:references.bzl): the e2e checkpoint with transformers' greedy generations, the
preset's own checkpoint, and WhisperFeatureExtractor's features of a test clip."""

from __future__ import annotations

import json
import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS

PRESET = TINY_PRESETS["tiny-whisper"]
GENAI_FRAMES = 3000
OVERRIDES = {"max_source_positions": GENAI_FRAMES // 2, "init_std": 0.2}
MELS = PRESET["num_mel_bins"]
START = PRESET["decoder_start_token_id"]
PROMPTS = [[START, 5, 7, 9], [START, 11, 13, 17]]
MAX_LENGTH = 24  # prompt + 20 new tokens, within max_target_positions (40)
RATE = 16000
#: "e2e": ckpt/ (OVERRIDES) and transformers.json (greedy rows per batch size);
#: "preset": ckpt/ (the preset's 60 frames); "clip": features.npy of clip_pcm()
CASES = ["e2e", "preset", "clip"]


def mel_features(batch: int, frames: int = GENAI_FRAMES, seed: int = 0) -> np.ndarray:
    """Random log-mel features [batch, MELS, frames]."""
    return np.random.default_rng(seed).standard_normal((batch, MELS, frames)).astype(np.float32)


def clip_pcm(seconds: int = 2) -> np.ndarray:
    """A 440 Hz tone with noise, 16-bit samples at RATE."""
    t = np.arange(RATE * seconds) / RATE
    rng = np.random.default_rng(0)
    signal = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.shape)
    return (np.clip(signal, -1, 1) * 32767).astype(np.int16)


def write_case(case: str, folder: str) -> None:
    from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint

    if case == "clip":
        import transformers

        expected = transformers.WhisperFeatureExtractor(feature_size=MELS)(
            clip_pcm().astype(np.float32) / 32768.0, sampling_rate=RATE,
            return_tensors="np").input_features
        np.save(os.path.join(folder, "features.npy"), expected)
        return
    checkpoint = os.path.join(folder, "ckpt")
    if case == "preset":
        make_hf_checkpoint(checkpoint, "tiny-whisper")
        return
    make_hf_checkpoint(checkpoint, "tiny-whisper", **OVERRIDES)
    model = load_hf_model(checkpoint)
    rows = {str(batch): _hf_generate(model, mel_features(batch), PROMPTS[:batch])
            for batch in (1, 2)}
    with open(os.path.join(folder, "transformers.json"), "w") as f:
        json.dump(rows, f)


def _hf_generate(model, feats: np.ndarray, prompts) -> list[list[int]]:
    """transformers' greedy tokens after each prompt, EOS suppressed, on one torch thread."""
    import torch

    new = MAX_LENGTH - len(prompts[0])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            out = model.generate(input_features=torch.from_numpy(feats),
                                 decoder_input_ids=torch.tensor(prompts), max_new_tokens=new,
                                 min_new_tokens=new, do_sample=False)
    finally:
        torch.set_num_threads(threads)
    rows = out.tolist()
    # WhisperForConditionalGeneration.generate returns the new tokens only (short form);
    # strip the prompt should a version return it.
    return [row[len(p):] if row[:len(p)] == list(p) else row for row, p in zip(rows, prompts)]
