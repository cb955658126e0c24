"""LLaVA: CLIP vision tower + two-layer projector + a Llama-family decoder,
built as three models (task ``image-text-to-text``, mobius/tasks/vision_language.py):

* ``vision``: pixel_values -> CLIP hidden state(s) ``vision_feature_layer``
  (an index, or a list whose states are concatenated on the feature axis),
  minus the class token under ``vision_feature_select_strategy`` "default"
  ("full" keeps it) -> ``multi_modal_projector`` (linear_1, act, linear_2)
  -> image_features [images * tokens per image, text hidden].
* ``embedding``: the decoder's token embedding of input_ids, with the
  positions holding ``image_token_index`` replaced by the image features in
  order (row-major over [batch, seq], as transformers' ``masked_scatter``).
* ``model``: the text family's own decoder (Llama, Mistral or Qwen2 classes),
  built with the causal-LM task's ``inputs_embeds`` flag.

Module names mirror the LLaVA checkpoints on the hub (``vision_tower.vision_model.*``,
``multi_modal_projector.*``, ``language_model.model.*``, ``language_model.lm_head``);
the spellings other transformers versions save (``vision_tower.*`` without
``vision_model``, ``model.language_model.*``, ``lm_head``, ...) are accepted
through ``checkpoint_aliases``.

config.json: llava-hf checkpoints keep only non-default values in their
``text_config`` / ``vision_config`` (transformers 4.x saved diffs), so the
defaults transformers would fill in are filled in here too: LlamaConfig's for a
Llama text config, CLIPVisionConfig's for a vision config, and LlavaConfig's own
vision defaults (CLIP ViT-L/14 at 336 px) when ``vision_config`` is absent. The
ArchitectureConfig of the family describes the decoder (``model_type`` "llava");
``config.options`` (LlavaOptions) holds the normalized ``text_config`` / ``vision_config``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.components.linear import Linear
from mobius.components.lm_head import LMHead
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import llama, mistral, qwen
from mobius.models.clip import CLIPVisionConfig, CLIPVisionModel, hidden_state_index
from mobius.models.family import ModelFamily
from mobius.models.vision_parts import VLM_CHECKPOINT_ALIASES
from mobius.tasks import vision_language
from mobius.weights.attach import IgnoredTensors, ignored_layers
from mobius.tiny.bases import COMMON, VOCAB_SIZE

#: text_config model_type -> the family whose decoder classes and config switches LLaVA reuses.
TEXT_FAMILIES: Mapping[str, ModelFamily] = {
    "llama": llama.FAMILY, "mistral": mistral.FAMILY, "qwen2": qwen.QWEN2,
}

#: transformers' LlamaConfig defaults, for text configs saved as diffs.
_LLAMA_DEFAULTS: Mapping[str, Any] = {
    "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
    "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_act": "silu",
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "bos_token_id": 1, "eos_token_id": 2, "attention_bias": False, "mlp_bias": False,
    "tie_word_embeddings": False,
}

#: LlavaConfig's vision tower when config.json has no vision_config at all.
_LLAVA_VISION_DEFAULTS: Mapping[str, Any] = {
    "model_type": "clip_vision_model", "hidden_size": 1024, "intermediate_size": 4096,
    "num_hidden_layers": 24, "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
}

#: LlavaConfig's own defaults.
_LLAVA_DEFAULTS: Mapping[str, Any] = {
    "image_token_index": 32000, "projector_hidden_act": "gelu",
    "vision_feature_select_strategy": "default", "vision_feature_layer": -2,
    "multimodal_projector_bias": True,
}
_LLAVA_KEYS = tuple(_LLAVA_DEFAULTS)


@dataclasses.dataclass(frozen=True)
class LlavaOptions:
    """What the module reads from the normalized config (normalize_llava)."""

    text_config: dict | None = None
    vision_config: dict | None = None
    image_token_index: int = _LLAVA_DEFAULTS["image_token_index"]
    projector_hidden_act: str = _LLAVA_DEFAULTS["projector_hidden_act"]
    vision_feature_select_strategy: str = _LLAVA_DEFAULTS["vision_feature_select_strategy"]
    vision_feature_layer: int | tuple[int, ...] = _LLAVA_DEFAULTS["vision_feature_layer"]
    multimodal_projector_bias: bool = _LLAVA_DEFAULTS["multimodal_projector_bias"]


def normalize_llava(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder's fields at the top level (what ArchitectureConfig reads), plus
    the LLaVA keys and the normalized ``text_config`` / ``vision_config``."""
    text = dict(raw.get("text_config") or {})
    text_type = text.setdefault("model_type", "llama")
    if text_type not in TEXT_FAMILIES:
        raise UnsupportedModelError(
            f"llava: text_config model_type {text_type!r} is not supported; "
            f"supported: {', '.join(sorted(TEXT_FAMILIES))}")
    if text_type == "llama":
        text = {**_LLAMA_DEFAULTS, **text}
    if raw.get("vision_config") is None:
        vision = dict(_LLAVA_VISION_DEFAULTS)
    else:
        vision = dict(raw["vision_config"])
    if vision.get("model_type", "clip_vision_model") != "clip_vision_model":
        raise UnsupportedModelError(
            f"llava: vision tower {vision.get('model_type')!r} is not supported; "
            f"supported: clip_vision_model")
    llava = {key: raw.get(key, default) for key, default in _LLAVA_DEFAULTS.items()}
    if raw.get("image_token_id") is not None and raw.get("image_token_index") is None:
        llava["image_token_index"] = raw["image_token_id"]  # transformers 5 attribute name
    # LlavaConfig: the top-level flag, or the text config's (saved there by older versions).
    tie = bool(raw.get("tie_word_embeddings") or text.get("tie_word_embeddings"))
    out = {**text, **llava, "model_type": "llava",
           "architectures": list(raw.get("architectures") or ["LlavaForConditionalGeneration"]),
           "tie_word_embeddings": tie, "text_config": text, "vision_config": vision}
    for key in ("pad_token_id", "dtype", "torch_dtype"):  # top-level values win
        if raw.get(key) is not None:
            out[key] = raw[key]
    return out


def _text_overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    text = raw["text_config"]
    return dict(TEXT_FAMILIES[text["model_type"]].config_overrides(text))


class LlavaMultiModalProjector(nn.Module):
    def __init__(self, in_features: int, hidden_size: int, activation: str, bias: bool):
        super().__init__()
        self.activation = activation
        self.linear_1 = Linear(in_features, hidden_size, bias)
        self.linear_2 = Linear(hidden_size, hidden_size, bias)

    def forward(self, op, x):
        return self.linear_2(op, apply_activation(op, self.linear_1(op, x), self.activation))


class LlavaForConditionalGeneration(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py:
    ``image_input_shape``, ``encode_images``, ``embed`` and ``language_model``."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        options = config.options
        vision = CLIPVisionConfig.from_dict(options.vision_config)
        self.feature_states = _feature_states(options, vision)
        strategy = options.vision_feature_select_strategy
        if strategy not in ("default", "full"):
            raise ConfigError(f"llava: vision_feature_select_strategy {strategy!r} is not "
                              f"'default' or 'full'")
        self.drop_class_token = strategy == "default"
        self.image_token_id = options.image_token_index
        if not 0 <= self.image_token_id < config.vocab_size:
            raise ConfigError(f"llava: image_token_index {self.image_token_id} is outside the "
                              f"vocabulary (vocab_size {config.vocab_size})")
        self.hidden_size = config.hidden_size
        self.image_input_shape = (vision.num_channels, vision.image_size, vision.image_size)
        self.tokens_per_image = vision.num_patches + (0 if self.drop_class_token else 1)

        self.vision_tower = CLIPVisionModel(vision, num_layers=max(self.feature_states))
        self.multi_modal_projector = LlavaMultiModalProjector(
            vision.hidden_size * len(self.feature_states), config.hidden_size,
            options.projector_hidden_act, options.multimodal_projector_bias)
        self.language_model = TEXT_FAMILIES[options.text_config["model_type"]].module(config)
        if config.tie_word_embeddings:
            # The embedding runs in embedding.onnx, the head in model.onnx: each
            # file holds its own copy of the matrix (same layout, no transpose).
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")

    def encode_images(self, op, pixel_values):
        """pixel_values [images, C, H, W] -> image_features [images * tokens, text hidden]."""
        states = self.vision_tower(op, pixel_values)
        selected = [states[i] for i in self.feature_states]
        if self.drop_class_token:
            selected = [op.Slice(s, op.Constant(value_ints=[1]),
                                 op.Constant(value_ints=[np.iinfo(np.int64).max]),
                                 op.Constant(value_ints=[1])) for s in selected]
        features = selected[0] if len(selected) == 1 else op.Concat(*selected, axis=-1)
        projected = self.multi_modal_projector(op, features)  # [images, tokens, text hidden]
        return op.Reshape(projected, op.Constant(value_ints=[-1, self.hidden_size]))

    def embed(self, op, input_ids, image_features):
        """Token embeddings [batch, seq, hidden] with image-token positions taken, in
        order, from image_features [n, hidden] (mobius/components/image_tokens.py)."""
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        embeds = self.language_model.model.embed_tokens(op, token_ids)  # [batch, seq, hidden]
        return merge_image_features(op, is_image, embeds, image_features, self.hidden_size)


def _feature_states(options: LlavaOptions, vision: CLIPVisionConfig) -> list[int]:
    """The CLIP hidden-state indices (0..layers) that ``vision_feature_layer`` selects."""
    layers = options.vision_feature_layer
    layers = [layers] if isinstance(layers, int) else list(layers)
    if not layers:
        raise ConfigError("llava: vision_feature_layer is an empty list")
    return [hidden_state_index(i, vision.num_hidden_layers) for i in layers]


def _unread_vision_layers(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    """The vision layers past the deepest requested hidden state, and post_layernorm."""
    vision = CLIPVisionConfig.from_dict(config.options.vision_config)
    first, count = max(_feature_states(config.options, vision)), vision.num_hidden_layers
    tower = r"(model\.)?vision_tower\.(vision_model\.)?"
    reason = "llava reads CLIP hidden states up to vision_feature_layer only"
    return (IgnoredTensors(tower + r"post_layernorm\..*", reason),
            *ignored_layers(tower + r"encoder\.layers\.", first, count, reason))


FAMILY = ModelFamily(
    name="llava",
    model_types=("llava",),
    architectures=("LlavaForConditionalGeneration",),
    module=LlavaForConditionalGeneration,
    task=vision_language.TASK,
    tiny_preset="tiny-llava",
    normalize_raw=normalize_llava,
    config_overrides=_text_overrides,
    options=LlavaOptions,
    ignored_tensors=_unread_vision_layers,
    checkpoint_aliases=VLM_CHECKPOINT_ALIASES,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Vision-language: tiny CLIP tower (32 px images, 8 px patches: 16 image tokens per
    # image; hidden 48, 4 heads of 12, MLP 100) + projector + tiny Llama text model.
    # The image token is a real vocabulary entry (transformers embeds it before
    # overwriting), the last one so random prompts rarely hit it.
    "tiny-llava": {
        "model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
        "image_token_index": VOCAB_SIZE - 1, "image_seq_length": 16,
        "projector_hidden_act": "gelu", "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default", "multimodal_projector_bias": True,
        "tie_word_embeddings": False,
        "text_config": {**COMMON, "model_type": "llama", "architectures": ["LlamaForCausalLM"]},
        "vision_config": {
            "model_type": "clip_vision_model", "hidden_size": 48, "intermediate_size": 100,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_channels": 3,
            "image_size": 32, "patch_size": 8, "hidden_act": "quick_gelu",
            "layer_norm_eps": 1e-5, "projection_dim": 40,
        },
    },
}
