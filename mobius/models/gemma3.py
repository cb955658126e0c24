"""Gemma 3 vision-language (Gemma3ForConditionalGeneration, model_type "gemma3"):
a SigLIP vision tower, Gemma3MultiModalProjector and the Gemma 3 text decoder,
built as the three models of mobius/tasks/vision_language.py:

* ``vision``: pixel_values -> SigLIP last_hidden_state (after post_layernorm;
  the attention-pooling head is unused) -> average pool of the patch grid down
  to ``mm_tokens_per_image`` tokens -> RMSNorm (1 + w) -> x @
  ``mm_input_projection_weight`` -> image_features [images * tokens, text hidden].
* ``embedding``: Gemma's scaled token embedding (x sqrt(hidden)) of input_ids,
  the image-token positions replaced, unscaled, by the image features in order.
* ``model``: the Gemma 3 text decoder (mobius/models/gemma.py) fed inputs_embeds
  (not scaled again) and also input_ids: transformers (given token_type_ids, as
  its processor makes them) lets each run of image tokens attend to itself both
  ways in the prefill, on top of the causal (and sliding-window) mask; the
  decoder reads the runs from input_ids (token_type_ids is 1 exactly at the
  image token). onnxruntime-genai feeds input_ids to a decoder that declares it.

Checkpoint names: hub checkpoints (transformers 4.x) and transformers 5's saved
files use ``vision_tower.vision_model.`` / ``vision_tower.``,
``multi_modal_projector.``, ``language_model.model.``; transformers 5 in memory
puts ``model.`` in front. lm_head is the token embedding unless tie_word_embeddings is false.
config.json: hub checkpoints keep only non-default text / vision values, so
Gemma3TextConfig's and SiglipVisionConfig's defaults are filled in here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import scalar
from mobius.components.lm_head import LMHead
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import gemma
from mobius.models.clip import CLIPVisionConfig
from mobius.models.family import ModelFamily
from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.models.siglip import SIGLIP_VISION, SiglipVisionTransformer
from mobius.models.vision_parts import POSITION_IDS, VLM_CHECKPOINT_ALIASES
from mobius.tasks import genai_image_settings as settings
from mobius.tasks import vision_language
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import VOCAB_SIZE

#: transformers' Gemma3TextConfig defaults (Gemma 3 4B sizes aside), for text configs saved as diffs.
_TEXT_DEFAULTS: Mapping[str, Any] = {
    "model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 2304,
    "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256, "sliding_window": 4096,
    "attention_bias": False, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
}
_GEMMA3_DEFAULTS: Mapping[str, Any] = {
    "mm_tokens_per_image": 256, "boi_token_index": 255999, "eoi_token_index": 256000,
    "image_token_index": 262144,
}
#: transformers' default sliding_window_pattern: every 6th layer is global
_PATTERN = 6
PROCESSOR_FILE = "processor_config.json"


@dataclasses.dataclass(frozen=True)
class Gemma3VLOptions(gemma.Gemma3Options):
    """The text decoder's switches and what the module reads from the normalized
    config (normalize_gemma3)."""

    vision_config: dict | None = None
    image_token_index: int = _GEMMA3_DEFAULTS["image_token_index"]
    mm_tokens_per_image: int = _GEMMA3_DEFAULTS["mm_tokens_per_image"]


def normalize_gemma3(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder's fields at the top level, plus the Gemma 3 keys and the
    normalized ``text_config`` / ``vision_config``."""
    text = {**_TEXT_DEFAULTS, **(raw.get("text_config") or {})}
    if text["model_type"] != "gemma3_text":
        raise UnsupportedModelError(f"gemma3: text_config model_type {text['model_type']!r} "
                                    f"is not supported; supported: gemma3_text")
    if text.get("use_bidirectional_attention"):
        raise UnsupportedModelError("gemma3: text_config use_bidirectional_attention (an "
                                    "encoder, not a decoder) is not supported")
    if not text.get("layer_types"):
        pattern = int(text.get("sliding_window_pattern") or text.get("_sliding_window_pattern")
                      or _PATTERN)
        text["layer_types"] = [gemma.FULL if (i + 1) % pattern == 0 else gemma.SLIDING
                               for i in range(int(text["num_hidden_layers"]))]
    vision = {**SIGLIP_VISION, **(raw.get("vision_config") or {})}
    if vision.get("model_type", "siglip_vision_model") != "siglip_vision_model":
        raise UnsupportedModelError(f"gemma3: vision tower {vision.get('model_type')!r} is not "
                                    f"supported; supported: siglip_vision_model")
    own = {key: raw.get(key, default) for key, default in _GEMMA3_DEFAULTS.items()}
    if raw.get("image_token_id") is not None and raw.get("image_token_index") is None:
        own["image_token_index"] = raw["image_token_id"]
    out = {**text, **own, "model_type": "gemma3",
           "architectures": list(raw.get("architectures") or ["Gemma3ForConditionalGeneration"]),
           "tie_word_embeddings": raw.get("tie_word_embeddings", True),
           "text_config": text, "vision_config": vision}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "dtype", "torch_dtype"):
        if raw.get(key) is not None:
            out[key] = raw[key]
    return out


class Gemma3MultiModalProjector(nn.Module):
    """[images, patches, vision hidden] -> [images, tokens, text hidden]."""

    def __init__(self, vision: CLIPVisionConfig, text_hidden: int, tokens_per_image: int):
        super().__init__()
        side = vision.image_size // vision.patch_size
        tokens_side = round(tokens_per_image**0.5)
        if tokens_side**2 != tokens_per_image or tokens_side > side or side % tokens_side:
            raise ConfigError(f"gemma3: mm_tokens_per_image {tokens_per_image} is not the square "
                              f"of a divisor of the {side} x {side} patch grid")
        self.side, self.kernel, self.hidden = side, side // tokens_side, vision.hidden_size
        self.mm_input_projection_weight = Weight([vision.hidden_size, text_hidden])
        self.mm_soft_emb_norm = RMSNorm(vision.hidden_size, vision.layer_norm_eps,
                                        weight_offset=1.0)

    def forward(self, op, hidden):
        if self.kernel > 1:
            grid = op.Reshape(op.Transpose(hidden, perm=[0, 2, 1]),
                              op.Constant(value_ints=[0, self.hidden, self.side, self.side]))
            pooled = op.AveragePool(grid, kernel_shape=[self.kernel, self.kernel],
                                    strides=[self.kernel, self.kernel])
            hidden = op.Transpose(op.Reshape(pooled, op.Constant(value_ints=[0, self.hidden, -1])),
                                  perm=[0, 2, 1])
        return op.MatMul(self.mm_soft_emb_norm(op, hidden), self.mm_input_projection_weight)


class _Tower(nn.Module):
    """``vision_tower.vision_model``: SigLIP without its pooling head."""

    def __init__(self, vision: CLIPVisionConfig):
        super().__init__()
        self.vision_model = SiglipVisionTransformer(vision, head=False)


class Gemma3ForConditionalGeneration(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    decoder_token_ids = True

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        options = config.options
        vision = CLIPVisionConfig.from_dict(options.vision_config, SIGLIP_VISION)
        self.vision = vision
        self.image_token_id = options.image_token_index
        if not 0 <= self.image_token_id < config.vocab_size:
            raise ConfigError(f"gemma3: image_token_index {self.image_token_id} is outside the "
                              f"vocabulary (vocab_size {config.vocab_size})")
        self.hidden_size = config.hidden_size
        self.image_input_shape = (vision.num_channels, vision.image_size, vision.image_size)
        self.tokens_per_image = options.mm_tokens_per_image
        self.vision_tower = _Tower(vision)
        self.multi_modal_projector = Gemma3MultiModalProjector(
            vision, config.hidden_size, self.tokens_per_image)
        self.language_model = gemma.Gemma3ForCausalLM(config)
        body = self.language_model.model
        self.embed_scale, body.embed_scale = body.embed_scale, None  # scaled in embedding.onnx
        body.block_token_id = self.image_token_id
        if config.tie_word_embeddings:  # the head's own copy (the lookup is in embedding.onnx)
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")

    def encode_images(self, op, pixel_values):
        """pixel_values [images, C, H, W] -> image_features [images * tokens, text hidden]."""
        hidden, _ = self.vision_tower.vision_model(op, pixel_values)
        projected = self.multi_modal_projector(op, hidden)
        return op.Reshape(projected, op.Constant(value_ints=[-1, self.hidden_size]))

    def embed(self, op, input_ids, image_features):
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        embeds = op.Mul(self.language_model.model.embed_tokens(op, token_ids),
                        scalar(op, self.embed_scale))
        return merge_image_features(op, is_image, embeds, image_features, self.hidden_size)

    def genai_processor_files(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """onnxruntime-genai's gemma3 image processor (onnxruntime-extensions steps):
        Gemma3ImageProcessor's resize to the tower's size (bilinear), rescale and
        mean/std (the checkpoint's preprocessor_config.json, default 1/255 and 0.5);
        a size other than the tower's, or pan-and-scan, fails."""
        size = self.vision.image_size
        settings.require(preprocessor, {
            "do_resize": True, "do_rescale": True, "do_normalize": True, "resample": 2,
            "do_pan_and_scan": False, "size": {"height": size, "width": size}},
            "gemma3 image processor (bilinear, the vision tower's size)")
        steps = [("decode_image", "DecodeImage", {"color_space": "RGB"}),
                 ("resize", "Resize", {"interpolation": "LINEAR", "width": size, "height": size,
                                       "keep_aspect_ratio": 0}),
                 ("rescale", "Rescale", {"rescale_factor": settings.number(
                     preprocessor, "rescale_factor", 1 / 255)}),
                 ("normalize", "Normalize", {
                     "mean": settings.triple(preprocessor, "image_mean", [0.5] * 3),
                     "std": settings.triple(preprocessor, "image_std", [0.5] * 3)}),
                 ("to_channel_first", "Permute3D", {"dims": [2, 0, 1]})]
        return {PROCESSOR_FILE: {"processor": {
            "name": "gemma_3_image_processing",
            "transforms": [{"operation": {"name": name, "type": kind, "attrs": attrs}}
                           for name, kind, attrs in steps]}}}


def _text_overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    return gemma._gemma3_overrides(raw)


def _unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    reason = "gemma3 reads SigLIP's last_hidden_state, not its attention-pooling head"
    return (IgnoredTensors(r"(model\.)?vision_tower\.(vision_model\.)?head\..*", reason),
            POSITION_IDS)


FAMILY = ModelFamily(
    name="gemma3",
    model_types=("gemma3",),
    architectures=("Gemma3ForConditionalGeneration",),
    module=Gemma3ForConditionalGeneration,
    task=vision_language.TASK,
    tiny_preset="tiny-gemma3-vl",
    normalize_raw=normalize_gemma3,
    config_overrides=_text_overrides,
    options=Gemma3VLOptions,
    ignored_tensors=_unread,
    checkpoint_aliases=VLM_CHECKPOINT_ALIASES,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Gemma 3 vision-language: tiny SigLIP tower (64 px images, 4 px patches: a 16 x 16 grid;
    # hidden 48, 4 heads of 12, MLP 100) + projector (256 tokens per image, as
    # onnxruntime-genai's gemma3 processor expands each image; the parity test pools to
    # fewer) + the tiny-gemma3 text model. boi / eoi / image tokens: the last three ids.
    "tiny-gemma3-vl": {
        "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
        "mm_tokens_per_image": 256, "boi_token_index": VOCAB_SIZE - 3,
        "eoi_token_index": VOCAB_SIZE - 2, "image_token_index": VOCAB_SIZE - 1,
        "tie_word_embeddings": True,
        "text_config": {**{k: v for k, v in gemma.TINY_GEMMA3.items() if k != "architectures"},
                        "max_position_embeddings": 512},  # 256 image tokens + text
        "vision_config": {
            "model_type": "siglip_vision_model", "hidden_size": 48, "intermediate_size": 100,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_channels": 3,
            "image_size": 64, "patch_size": 4, "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-6, "vision_use_head": False,
        },
    },
}
