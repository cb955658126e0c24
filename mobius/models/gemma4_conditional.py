"""Gemma 4 as released (Gemma4ForConditionalGeneration, model_type "gemma4"): the vision
tower of mobius/models/gemma4_vision.py and the text decoder of mobius/models/gemma4.py
(from the nested ``text_config``), built as the three models of
mobius/tasks/vision_language.py, onnxruntime-genai's ``gemma4`` type:

* ``vision``: pixel_values [images, patches, 3 * patch^2] and pixel_position_ids
  [images, patches, 2] (transformers' and genai's Gemma 4 image processors patchify) ->
  the tower's real soft tokens through ``embed_vision`` -> image_features [tokens, hidden].
* ``embedding``: the scaled token embedding, image-token positions replaced in order.
* ``model``: the decoder on inputs_embeds and input_ids: per-layer inputs read the pad
  token's row at media tokens (image, video, audio), as transformers does; with
  ``use_bidirectional_attention`` "vision" a run of image tokens attends to itself both
  ways on the sliding layers (transformers does so given mm_token_type_ids, which its
  processor makes).

* ``speech`` (where config.json has an ``audio_config``): the audio tower of
  mobius/models/gemma4_audio.py and ``embed_audio``: audio_embeds [audios, frames, mel]
  (genai's Gemma4LogMel features), audio_attention_mask [audios, frames] (bool),
  audio_sizes [audios] -> audio_features [tokens, hidden], the real soft tokens (at most
  sum(audio_sizes)); the embedding model replaces the audio-token positions in order.
  Without an audio_config the tower's tensors are declared unread and genai_config
  blanks the speech processor.

Video tokens are not expanded (genai's gemma4 type takes images).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.components.causal_transformer import scalar
from mobius.components.lm_head import LMHead
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.gemma4_audio import Gemma4AudioModel, audio_options, real_tokens
from mobius.models.gemma4 import (FAMILY as TEXT, FULL, SLIDING, TINY_PRESETS as TEXT_PRESETS,
                                  Gemma4ForCausalLM, Gemma4Options)
from mobius.models.gemma4_vision import (Gemma4MultimodalEmbedder, Gemma4VisionModel,
                                         vision_options)
from mobius.tasks import vision_language
from mobius.tasks.task import TensorSpec
from mobius.tasks.vision_language import (NUM_AUDIOS, NUM_FRAMES, NUM_IMAGES,
                                          NUM_PATCHES)
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import VOCAB_SIZE

#: the multimodal model's parts this package does not run
UNREAD = tuple(IgnoredTensors(rf"model\.{part}\..*", f"{part} (the audio tower is not built)")
               for part in ("audio_tower", "embed_audio"))
PROCESSOR_FILE, SPEECH_PROCESSOR_FILE = "processor_config.json", "speech_processor.json"
#: transformers' Gemma4Config token ids
_TOKEN_DEFAULTS = {"image_token_id": 258_880, "video_token_id": 258_884,
                   "audio_token_id": 258_881}


def speech_sections(has_audio: bool) -> dict[str, Any]:
    """genai_config's speech model and the embedding's audio_features (the same names in
    genai 0.18's gemma4 and gemma4_unified types); without audio the speech processor
    blanked (those types name one otherwise)."""
    if not has_audio:
        return {"speech": {"config_filename": ""}}
    return {
        "speech": {"filename": "speech.onnx", "config_filename": SPEECH_PROCESSOR_FILE,
                   "inputs": {"audio_embeds": "audio_embeds",
                              "attention_mask": "audio_attention_mask",
                              "audio_sizes": "audio_sizes"},
                   "outputs": {"audio_features": "audio_features"}},
        "embedding": {"filename": "embedding.onnx",
                      "inputs": {"input_ids": "input_ids",
                                 "image_features": "image_features",
                                 "audio_features": "audio_features"},
                      "outputs": {"inputs_embeds": "inputs_embeds"}}}


@dataclasses.dataclass(frozen=True)
class Gemma4VLOptions(Gemma4Options):
    """The decoder's switches plus what the multimodal model reads (normalize)."""

    vision_config: dict | None = None
    audio_config: dict | None = None
    image_token_id: int = _TOKEN_DEFAULTS["image_token_id"]
    video_token_id: int = _TOKEN_DEFAULTS["video_token_id"]
    audio_token_id: int = _TOKEN_DEFAULTS["audio_token_id"]


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``text_config`` at the top level, the token ids and ``vision_config`` beside it;
    tie_word_embeddings is the outer config's."""
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError("config.json: gemma4: text_config (the decoder's config) is missing")
    tie = raw.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
    out = TEXT.normalize_raw({**text, "tie_word_embeddings": tie,
                              "architectures": list(raw.get("architectures") or [])})
    own = {key: raw.get(key, default) for key, default in _TOKEN_DEFAULTS.items()}
    return {**out, **own, "model_type": "gemma4", "vision_config": raw.get("vision_config"),
            "audio_config": raw.get("audio_config")}


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder's checks, and the vision tower's, before any weight is read."""
    vision_options(raw.get("vision_config"))
    if raw.get("audio_config") is not None:
        audio_options(raw["audio_config"])
    return TEXT.config_overrides(raw)


class _Towers(nn.Module):
    """``model.vision_tower`` and ``model.embed_vision``."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        vision = vision_options(config.options.vision_config)
        self.vision_tower = Gemma4VisionModel(vision)
        self.embed_vision = Gemma4MultimodalEmbedder(vision.hidden_size, config.hidden_size,
                                                     vision.rms_norm_eps)
        if config.options.audio_config is not None:
            audio = audio_options(config.options.audio_config)
            self.audio_tower = Gemma4AudioModel(audio)
            self.embed_audio = Gemma4MultimodalEmbedder(audio.output_proj_dims,
                                                        config.hidden_size, audio.rms_norm_eps)


class Gemma4ForConditionalGeneration(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    decoder_token_ids = True

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        options = config.options
        self.image_token_id = options.image_token_id
        if not 0 <= self.image_token_id < config.vocab_size:
            raise ConfigError(f"config.json: gemma4: image_token_id {self.image_token_id} is "
                              f"outside the vocabulary (vocab_size {config.vocab_size})")
        self.hidden_size = config.hidden_size
        self.model = _Towers(config)
        self.vision = self.model.vision_tower.options
        patch = 3 * self.vision.patch_size**2
        self.vision_inputs = (
            TensorSpec("pixel_values", None, (NUM_IMAGES, NUM_PATCHES, patch)),
            TensorSpec("pixel_position_ids", ir.DataType.INT64,
                       (NUM_IMAGES, NUM_PATCHES, 2)))
        self._speech(config)
        self.language_model = Gemma4ForCausalLM(config)
        body = self.language_model.model
        body.media_token_ids = (options.image_token_id, options.video_token_id,
                                options.audio_token_id)
        if options.use_bidirectional_attention == "vision":
            body.block_token_id = self.image_token_id
        if config.tie_word_embeddings:  # the head's own copy (the lookup is in embedding.onnx)
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")

    def _speech(self, config: ArchitectureConfig) -> None:
        """The speech model's inputs where config.json has an audio_config."""
        self.audio_token_id = None
        raw = config.options.audio_config
        if raw is None:
            return
        self.audio_token_id = config.options.audio_token_id
        if not 0 <= self.audio_token_id < config.vocab_size:
            raise ConfigError(f"config.json: gemma4: audio_token_id {self.audio_token_id} is "
                              f"outside the vocabulary (vocab_size {config.vocab_size})")
        self.mel = audio_options(raw).mel_bins
        self.speech_inputs = (
            TensorSpec("audio_embeds", None, (NUM_AUDIOS, NUM_FRAMES, self.mel)),
            TensorSpec("audio_attention_mask", ir.DataType.BOOL, (NUM_AUDIOS, NUM_FRAMES)),
            TensorSpec("audio_sizes", ir.DataType.INT64, (NUM_AUDIOS,)))

    def encode_audio(self, op, audio_embeds, audio_attention_mask, audio_sizes):
        """Log-mel frames -> audio_features [real soft tokens, at most sum(audio_sizes)]."""
        hidden, valid = self.model.audio_tower(op, audio_embeds, audio_attention_mask)
        tokens = real_tokens(op, self.model.embed_audio(op, hidden), valid)
        count = op.ReduceSum(audio_sizes, op.Constant(value_ints=[0]), keepdims=1)
        return op.Slice(tokens, op.Constant(value_ints=[0]), count, op.Constant(value_ints=[0]))

    def encode_images(self, op, pixel_values, pixel_position_ids):
        """Patches -> image_features [real soft tokens of every image, text hidden]."""
        tokens = self.model.vision_tower(op, pixel_values, pixel_position_ids)
        return self.model.embed_vision(op, tokens)

    def embed(self, op, input_ids, image_features, audio_features=None):
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        if audio_features is not None:
            is_audio, token_ids = image_positions(op, token_ids, self.audio_token_id)
        body = self.language_model.model
        embeds = op.Mul(body.embed_tokens(op, token_ids), scalar(op, body.embed_scale))
        embeds = merge_image_features(op, is_image, embeds, image_features, self.hidden_size)
        if audio_features is None:
            return embeds
        return merge_image_features(op, is_audio, embeds, audio_features, self.hidden_size)

    def genai_model_config(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        return speech_sections(self.audio_token_id is not None)

    def genai_processor_files(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """onnxruntime-genai's gemma4 image processor: Gemma4ImageTransform resizes within
        max_soft_tokens x kernel^2 patches (aspect kept), rescales to [0, 1] and patchifies."""
        attrs = {"patch_size": self.vision.patch_size,
                 "max_soft_tokens": int(preprocessor.get("max_soft_tokens", 280)),
                 "pooling_kernel_size": self.vision.pooling_kernel_size}
        files = {PROCESSOR_FILE: image_processor(attrs)}
        if self.audio_token_id is not None:
            files[SPEECH_PROCESSOR_FILE] = speech_processor(self.mel)
        return files


FAMILY = ModelFamily(
    name="gemma4", model_types=("gemma4",), architectures=("Gemma4ForConditionalGeneration",),
    cohorts=("every-dtype",),
    module=Gemma4ForConditionalGeneration, task=vision_language.TASK,
    tiny_preset="tiny-gemma4-mm", options=Gemma4VLOptions, normalize_raw=normalize,
    config_overrides=_overrides, attention_traits=TEXT.attention_traits,
    ignored_tensors=lambda config: () if config.options.audio_config else UNREAD,
    checkpoint_aliases=(("language_model.model.", ("model.language_model.",
                                                    "language_model.model.")),
                        ("language_model.lm_head.", ("lm_head.", "language_model.lm_head."))),
)

def image_processor(attrs: Mapping[str, int]) -> dict[str, Any]:
    """onnxruntime-extensions' image processor: decode (RGB), then Gemma4ImageTransform
    with ``attrs`` (patch_size, max_soft_tokens, pooling_kernel_size)."""
    steps = [("decode_image", "DecodeImage", {"color_space": "RGB"}),
             ("gemma4_image_transform", "Gemma4ImageTransform", dict(attrs))]
    return {"processor": {
        "name": "gemma4_image_processor",
        "transforms": [{"operation": {"name": name, "type": kind, "attrs": attrs}}
                       for name, kind, attrs in steps]}}


def speech_processor(mel: int) -> dict[str, Any]:
    """onnxruntime-extensions' Gemma 4 audio features: decode, Gemma4LogMel with
    transformers' Gemma4AudioFeatureExtractor settings (16 kHz, 20 ms frames, 10 ms hop,
    0-8 kHz, mel floor 1e-3)."""
    attrs = {"feature_size": mel, "sampling_rate": 16000, "frame_length_ms": 20.0,
             "hop_length_ms": 10.0, "min_frequency": 0.0, "max_frequency": 8000.0,
             "preemphasis": 0.0, "preemphasis_htk_flavor": 1, "fft_overdrive": 0,
             "mel_floor": 0.001}
    return {"feature_extraction": {"sequence": [
        {"operation": {"name": "audio_decoder", "type": "AudioDecoder"}},
        {"operation": {"name": "gemma4_log_mel", "type": "Gemma4LogMel", "attrs": attrs}}]}}


_TEXT = {k: v for k, v in TEXT_PRESETS["tiny-gemma4"].items()
         if k not in ("model_type", "architectures", "tie_word_embeddings")}

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # tiny-gemma4's decoder cut to 3 layers (sliding, global, global sharing the first's K/V)
    # with the 26B-A4B feed-forward (4 experts of 40 beside the dense MLP); a 2-layer vision
    # tower (4 px patches, 2 x 2 pooling, hidden 48, 3 heads of 16) and a 1-layer audio
    # tower (8 mel bins). Image / video / audio tokens: the last three ids. Every expert is
    # chosen: a random router's probabilities lie within 1e-4 of each other (its input is
    # scaled by hidden^-0.5), so a true-bf16 graph would choose other experts than a
    # float32-compute one; gemma4_test checks top-k choice (case moe).
    "tiny-gemma4-mm": {
        "model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
        "tie_word_embeddings": True, "image_token_id": VOCAB_SIZE - 3,
        "video_token_id": VOCAB_SIZE - 2, "audio_token_id": VOCAB_SIZE - 1,
        "boi_token_id": VOCAB_SIZE - 6, "eoi_token_id": VOCAB_SIZE - 5,
        "boa_token_id": VOCAB_SIZE - 4, "eoa_token_index": VOCAB_SIZE - 7,
        "text_config": {**_TEXT, "model_type": "gemma4_text", "enable_moe_block": True,
                        "num_hidden_layers": 3, "layer_types": [SLIDING, FULL, FULL],
                        "num_kv_shared_layers": 1,
                        "num_experts": 4, "top_k_experts": 4, "moe_intermediate_size": 40},
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 48,
                          "intermediate_size": 96, "num_hidden_layers": 2,
                          "num_attention_heads": 3, "num_key_value_heads": 3, "head_dim": 16,
                          "patch_size": 4, "pooling_kernel_size": 2,
                          "position_embedding_size": 64},
        "audio_config": {"model_type": "gemma4_audio", "hidden_size": 40,
                         "num_hidden_layers": 1, "num_attention_heads": 2,
                         "subsampling_conv_channels": [8, 4], "output_proj_dims": 40,
                         "attention_chunk_size": 4, "attention_context_left": 5},
    },
}
