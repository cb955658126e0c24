"""Gemma 4 Unified (Gemma4UnifiedForConditionalGeneration, model_type "gemma4_unified"):
Gemma 4 without a vision tower. Built as the three models of
mobius/tasks/vision_language.py (onnxruntime-genai's ``gemma4_unified`` type):

* ``vision``: merged patches (mobius/models/gemma4_unified_vision.py) -> one text-width
  token per real patch -> image_features [tokens, hidden].
* ``speech`` (where config.json has an ``audio_config``): encoder-free audio
  (mobius/models/gemma4_unified_audio.py): audio_embeds [audios, frames, audio_embed_dim]
  (raw waveform frames), audio_attention_mask [audios, frames] (bool), audio_sizes
  [audios] -> ``model.embed_audio`` -> audio_features [real frames, hidden] (at most
  sum(audio_sizes)), the inputs genai 0.18's gemma4_unified type feeds from its
  Gemma4Audio raw_frames processor (speech_processor.json). Audio tokens stay causal.
* ``embedding``: the scaled token embedding, image- then audio-token positions replaced
  in order.
* ``model``: the Gemma 4 decoder of mobius/models/gemma4.py without per-layer inputs or
  experts (the text config has neither); KV sharing from ``num_kv_shared_layers``.
  ``use_bidirectional_attention`` defaults to "vision": a run of image tokens attends
  to itself whole, both ways, on every layer (on sliding layers past the window too),
  as transformers' forward does given mm_token_type_ids (its compiled-cache generate
  path keeps global layers causal and sliding ones within the window, as Gemma 4 does;
  the two disagree); null makes the decoder causal; "all" is refused.

Without an audio_config there is no speech model (embed_audio tensors are then unread,
an error) and genai_config blanks the speech processor. processor_config.json is genai's
image processor (mobius/models/gemma4_unified_image.py: Gemma4ImageTransform at the merged
patch size), so genai's multimodal processor takes images (and audio) as they are.
"""

from __future__ import annotations

from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.causal_transformer import scalar
from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.components.lm_head import LMHead
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.gemma4 import (FAMILY as TEXT, FULL, SLIDING, TINY_PRESETS as TEXT_PRESETS,
                                  Gemma4ForCausalLM)
from mobius.models.gemma4_audio import real_tokens
from mobius.models.gemma4_conditional import (PROCESSOR_FILE, SPEECH_PROCESSOR_FILE,
                                              Gemma4VLOptions, image_processor, speech_sections)
from mobius.models.gemma4_unified_image import image_transform_attrs
from mobius.models.gemma4_unified_audio import frames_processor, unified_audio_options
from mobius.models.gemma4_unified_vision import (Gemma4UnifiedVision,
                                                 Gemma4UnifiedVisionOptions,
                                                 unified_vision_options)
from mobius.models.gemma4_vision import Gemma4MultimodalEmbedder
from mobius.tasks import vision_language
from mobius.tasks.image_processor import RAW_KEY
from mobius.tasks.task import TensorSpec
from mobius.tasks.vision_language import NUM_AUDIOS, NUM_FRAMES, NUM_IMAGES, NUM_PATCHES
from mobius.tiny.bases import VOCAB_SIZE

#: transformers' Gemma4UnifiedConfig token ids
_TOKEN_DEFAULTS = {"image_token_id": 258_880, "video_token_id": 258_884,
                   "audio_token_id": 258_881}


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``text_config`` at the top level (no per-layer inputs, no experts, bidirectional
    "vision" unless it says otherwise), the token ids and ``vision_config`` beside it."""
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError("config.json: gemma4_unified: text_config (the decoder's config) "
                          "is missing")
    tie = raw.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
    out = TEXT.normalize_raw({
        **text, "tie_word_embeddings": tie, "hidden_size_per_layer_input": 0,
        "enable_moe_block": False,
        "use_bidirectional_attention": text.get("use_bidirectional_attention", "vision"),
        "architectures": list(raw.get("architectures") or [])})
    own = {key: raw.get(key, default) for key, default in _TOKEN_DEFAULTS.items()}
    return {**out, **own, "model_type": "gemma4_unified",
            "vision_config": raw.get("vision_config"), "audio_config": raw.get("audio_config")}


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder's checks, the embedder's and genai's image processor's, before any
    weight is read."""
    image_transform_attrs(raw.get(RAW_KEY) or {}, unified_vision_options(raw.get("vision_config")))
    if raw.get("audio_config") is not None:
        unified_audio_options(raw["audio_config"])
    mode = raw.get("use_bidirectional_attention")
    if mode not in (None, "vision", "all"):  # "all": the decoder's own refusal
        raise ConfigError(f"config.json: gemma4_unified: use_bidirectional_attention "
                          f"{mode!r} is not supported (null or 'vision')")
    return TEXT.config_overrides(raw)


class _Embedders(Gemma4UnifiedVision):
    """``model``: the image embedder and, with an audio_config, ``embed_audio``."""

    def __init__(self, vision: Gemma4UnifiedVisionOptions, audio_config: dict | None,
                 text_hidden: int):
        super().__init__(vision, text_hidden)
        if audio_config is not None:
            audio = unified_audio_options(audio_config)
            self.embed_audio = Gemma4MultimodalEmbedder(audio.audio_embed_dim, text_hidden,
                                                        audio.rms_norm_eps)


class Gemma4UnifiedForConditionalGeneration(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    decoder_token_ids = True

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        options = config.options
        self.image_token_id = _token_id(config, "image_token_id")
        self.hidden_size = config.hidden_size
        self.model = _Embedders(unified_vision_options(options.vision_config),
                                options.audio_config, config.hidden_size)
        patch = 3 * self.model.options.model_patch_size**2
        self.vision_inputs = (
            TensorSpec("pixel_values", None, (NUM_IMAGES, NUM_PATCHES, patch)),
            TensorSpec("pixel_position_ids", ir.DataType.INT64,
                       (NUM_IMAGES, NUM_PATCHES, 2)))
        self._speech(config)
        self.language_model = Gemma4ForCausalLM(config)
        if options.use_bidirectional_attention == "vision":
            body = self.language_model.model
            body.block_token_id, body.whole_blocks = self.image_token_id, True
        if config.tie_word_embeddings:  # the head's own copy (the lookup is in embedding.onnx)
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")

    def _speech(self, config: ArchitectureConfig) -> None:
        """The speech model's inputs where config.json has an audio_config."""
        self.audio_token_id = None
        if config.options.audio_config is None:
            return
        self.audio_token_id = _token_id(config, "audio_token_id")
        self.frame = unified_audio_options(config.options.audio_config).audio_embed_dim
        self.speech_inputs = (
            TensorSpec("audio_embeds", None, (NUM_AUDIOS, NUM_FRAMES, self.frame)),
            TensorSpec("audio_attention_mask", ir.DataType.BOOL, (NUM_AUDIOS, NUM_FRAMES)),
            TensorSpec("audio_sizes", ir.DataType.INT64, (NUM_AUDIOS,)))

    def encode_images(self, op, pixel_values, pixel_position_ids):
        """Merged patches -> image_features [real patches of every image, text hidden]."""
        return self.model(op, pixel_values, pixel_position_ids)

    def encode_audio(self, op, audio_embeds, audio_attention_mask, audio_sizes):
        """Waveform frames -> audio_features [real frames, at most sum(audio_sizes)]."""
        tokens = real_tokens(op, self.model.embed_audio(op, audio_embeds),
                             audio_attention_mask)
        count = op.ReduceSum(audio_sizes, op.Constant(value_ints=[0]), keepdims=1)
        return op.Slice(tokens, op.Constant(value_ints=[0]), count, op.Constant(value_ints=[0]))

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
        """genai's image processor and, where the package has a speech model, its frame
        cutter."""
        attrs = image_transform_attrs(preprocessor, self.model.options)
        files = {PROCESSOR_FILE: image_processor(attrs)}
        if self.audio_token_id is not None:
            files[SPEECH_PROCESSOR_FILE] = frames_processor(self.frame)
        return files


def _token_id(config: ArchitectureConfig, key: str) -> int:
    """config.json's ``key``, checked to lie within the vocabulary."""
    value = getattr(config.options, key)
    if not 0 <= value < config.vocab_size:
        raise ConfigError(f"config.json: gemma4_unified: {key} {value} is outside the "
                          f"vocabulary (vocab_size {config.vocab_size})")
    return value


FAMILY = ModelFamily(
    name="gemma4_unified", model_types=("gemma4_unified",),
    architectures=("Gemma4UnifiedForConditionalGeneration",),
    module=Gemma4UnifiedForConditionalGeneration, task=vision_language.TASK,
    tiny_preset="tiny-gemma4-unified", options=Gemma4VLOptions, normalize_raw=normalize,
    config_overrides=_overrides, attention_traits=TEXT.attention_traits,
    checkpoint_aliases=(("language_model.model.", ("model.language_model.",
                                                    "language_model.model.")),
                        ("language_model.lm_head.", ("lm_head.", "language_model.lm_head."))),
)

_TEXT = {k: v for k, v in TEXT_PRESETS["tiny-gemma4"].items()
         if k not in ("model_type", "architectures", "tie_word_embeddings",
                      "hidden_size_per_layer_input", "vocab_size_per_layer_input")}

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # tiny-gemma4's decoder without per-layer inputs, cut to 3 layers (sliding, global,
    # global sharing the first global's K/V, double-wide MLP), bidirectional image spans;
    # 2 x 2 merges of 2 px patches (48 pixel values a token) embedded at 40, a table of
    # 12 positions; 24-sample audio frames through embed_audio. Image / video / audio:
    # the last ids.
    "tiny-gemma4-unified": {
        "model_type": "gemma4_unified",
        "architectures": ["Gemma4UnifiedForConditionalGeneration"],
        "tie_word_embeddings": True, "image_token_id": VOCAB_SIZE - 3,
        "video_token_id": VOCAB_SIZE - 2, "audio_token_id": VOCAB_SIZE - 1,
        "boi_token_id": VOCAB_SIZE - 6, "eoi_token_id": VOCAB_SIZE - 5,
        "boa_token_id": VOCAB_SIZE - 4, "eoa_token_index": VOCAB_SIZE - 7,
        "text_config": {**_TEXT, "model_type": "gemma4_unified_text",
                        "num_hidden_layers": 3, "layer_types": [SLIDING, FULL, FULL],
                        "num_kv_shared_layers": 1, "use_bidirectional_attention": "vision"},
        "vision_config": {"model_type": "gemma4_unified_vision", "patch_size": 2,
                          "pooling_kernel_size": 2, "mm_embed_dim": 40,
                          "output_proj_dims": 40, "mm_posemb_size": 12},
        "audio_config": {"model_type": "gemma4_unified_audio", "audio_embed_dim": 24},
    },
}
