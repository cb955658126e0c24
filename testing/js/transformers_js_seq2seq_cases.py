"""transformers' side of transformers_js_seq2seq_test, run at build time (reference_cases,
//rules:references.bzl), so the test process imports neither torch nor transformers.

One case per encoder-decoder family transformers.js runs: ckpt/ (the tiny preset with
larger random weights, so the greedy tokens change from step to step; every parameter
random, biases too) and expected.json: transformers' greedy ``generate`` tokens
(NEW_TOKENS of them) and, for text, their decode without special tokens (what
transformers 4's text2text-generation pipeline returned; transformers 5 has none).
Whisper's checkpoint gets what a real one has and the tiny preset lacks: a
``preprocessor_config.json`` whose 3-second window gives the encoder's frame count
(2 * max_source_positions) and a WhisperTokenizer class (transformers.js' ASR
pipeline decodes with it); its input is audio.f32, random speech-band samples at
16 kHz, whose log-mel features both clients compute.
"""

from __future__ import annotations

import json
import os

TEXT = "translate English to German: The house is wonderful."
AUDIO = "audio.f32"
SAMPLING_RATE = 16000
NEW_TOKENS = 12
#: case -> (tiny preset, pipeline task, config overrides)
CASES_SPEC = {
    "t5": ("tiny-t5", "text2text-generation", {"initializer_factor": 4.0}),
    "mt5": ("tiny-mt5", "text2text-generation", {"initializer_factor": 4.0}),
    "bart": ("tiny-bart", "text2text-generation", {"init_std": 0.5}),
    "marian": ("tiny-marian", "text2text-generation", {"init_std": 0.5}),
    "whisper": ("tiny-whisper", "automatic-speech-recognition", {"init_std": 0.2}),
}
CASES = sorted(CASES_SPEC)


def arguments(case: str, folder: str) -> list:
    """The pipeline's positional arguments: the text, or the audio file's path."""
    speech = CASES_SPEC[case][1] == "automatic-speech-recognition"
    return [os.path.join(folder, AUDIO) if speech else TEXT]


def options() -> dict:
    """generate's settings, the same keywords in both clients."""
    return {"max_new_tokens": NEW_TOKENS, "min_new_tokens": NEW_TOKENS, "do_sample": False}


def write_case(case: str, folder: str) -> None:
    """ckpt/, whisper's audio.f32 and expected.json (see above) into ``folder``."""
    import torch
    import transformers

    from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint, randomize_zero_tensors

    preset, task, overrides = CASES_SPEC[case]
    ckpt = make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, **overrides)
    randomize_zero_tensors(ckpt)  # bart's final_logits_bias, ...
    model = load_hf_model(ckpt)
    with torch.no_grad():
        if task == "automatic-speech-recognition":
            inputs = _speech_inputs(ckpt, folder)
            tokens = model.generate(**inputs, **options())[0].tolist()
            expected = {"tokens": tokens}
        else:
            _tokenizer_inputs(ckpt, ["input_ids", "attention_mask"])
            tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt)
            inputs = tokenizer([TEXT], return_tensors="pt")
            tokens = model.generate(**inputs, **options())[0].tolist()
            # transformers 5 has no text2text-generation pipeline: its text was this decode
            expected = {"tokens": tokens,
                        "text": tokenizer.decode(tokens, skip_special_tokens=True)}
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def _speech_inputs(ckpt: str, folder: str) -> dict:
    """Writes whisper's preprocessor config, tokenizer class and audio; returns the
    features transformers computes from the audio."""
    import numpy as np
    import transformers

    with open(os.path.join(ckpt, "config.json")) as f:
        config = json.load(f)
    chunk = 3  # seconds: hop_length = chunk * rate / frames
    frames = 2 * config["max_source_positions"]
    extractor = transformers.WhisperFeatureExtractor(
        feature_size=config["num_mel_bins"], sampling_rate=SAMPLING_RATE, chunk_length=chunk,
        hop_length=chunk * SAMPLING_RATE // frames, n_fft=400)
    extractor.save_pretrained(ckpt)
    _tokenizer_inputs(ckpt, None, tokenizer_class="WhisperTokenizer")
    rng = np.random.default_rng(0)
    t = np.arange(int(2.5 * SAMPLING_RATE)) / SAMPLING_RATE
    audio = (0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 3 * t)
             + 0.1 * rng.standard_normal(t.size)).astype(np.float32)
    audio.tofile(os.path.join(folder, AUDIO))
    return extractor(audio, sampling_rate=SAMPLING_RATE, return_tensors="pt")


def _tokenizer_inputs(ckpt: str, model_inputs: list[str] | None, **extra) -> None:
    """Edits the tiny tokenizer_config.json as the family's states it (t5 / bart tokenizers
    return no token_type_ids; whisper's class is WhisperTokenizer)."""
    path = os.path.join(ckpt, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    if model_inputs is not None:
        config["model_input_names"] = model_inputs
    config.update(extra)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
