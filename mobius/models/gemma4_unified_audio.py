"""Gemma 4 Unified's encoder-free audio: no tower.

Each soft token is one frame of ``audio_embed_dim`` raw 16 kHz samples (transformers'
Gemma4UnifiedAudioFeatureExtractor zero-pads the waveform to whole frames), embedded by
Gemma 4's embedder (``model.embed_audio``: scale-free RMSNorm, projection to the text
width). onnxruntime-genai cuts the frames itself (the speech processor config this module
writes) and feeds them to the speech model as audio_embeds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mobius.config.options import read_options
from mobius.errors import ConfigError

#: transformers' Gemma4UnifiedAudioConfig properties that read and set audio_embed_dim
ALIASES = ("audio_samples_per_token", "hidden_size", "output_proj_dims")
#: the sampling rate transformers' feature extractor and processor assume
SAMPLING_RATE = 16_000


@dataclasses.dataclass(frozen=True)
class Gemma4UnifiedAudioOptions:
    """audio_config, with transformers' Gemma4UnifiedAudioConfig defaults."""

    audio_embed_dim: int = 640
    rms_norm_eps: float = 1e-6


def unified_audio_options(raw: dict) -> Gemma4UnifiedAudioOptions:
    """The checked audio_config. transformers lets each alias set the frame size, the
    last key read winning: keys that disagree are refused rather than guessed."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json: gemma4_unified: audio_config must be a mapping")
    sizes = {key: raw[key] for key in ("audio_embed_dim", *ALIASES) if raw.get(key) is not None}
    if len(set(sizes.values())) > 1:
        raise ConfigError(f"config.json: gemma4_unified: audio_config frame sizes disagree "
                          f"({sizes}): not supported")
    read = {key: value for key, value in raw.items() if key not in ALIASES}
    options = read_options(Gemma4UnifiedAudioOptions,
                           {**read, "audio_embed_dim": next(iter(sizes.values()), None)})
    if options.audio_embed_dim < 1:
        raise ConfigError(f"config.json: gemma4_unified: audio_config audio_embed_dim "
                          f"{options.audio_embed_dim} is below 1")
    return options


def frames_processor(samples_per_token: int) -> dict[str, Any]:
    """onnxruntime-extensions' speech processor: decode (16 kHz mono), then cut the
    waveform into zero-padded frames of ``samples_per_token`` samples (genai 0.18 knows
    the step as Gemma4Audio of type raw_frames; "Gemma4UnifiedAudioFrames" as a type
    fails to load with "[Operation]: type is not supported")."""
    attrs = {"type": "raw_frames", "audio_samples_per_token": samples_per_token,
             "sampling_rate": SAMPLING_RATE, "padding_value": 0.0}
    return {"feature_extraction": {"sequence": [
        {"operation": {"name": "audio_decoder", "type": "AudioDecoder"}},
        {"operation": {"name": "gemma4_audio", "type": "Gemma4Audio", "attrs": attrs}}]}}
