"""Qwen2.5-VL: a window-attention vision tower (mobius/models/qwen2_5_vl_vision.py)
+ a Qwen2 decoder with M-RoPE, built as the three models of the
``image-text-to-text`` task (mobius/tasks/vision_language.py), in the layout
onnxruntime-genai's ``qwen2_5_vl`` type runs:

* ``vision``: pixel_values [patches, patch_dim] + image_grid_thw [images, 3]
  -> image_features [patches / spatial_merge^2, text hidden];
* ``embedding``: token embeddings with ``image_token_id`` positions replaced by
  the features in order (mobius/components/image_tokens.py);
* ``model``: the Qwen2 decoder (QKV bias) whose position_ids are [3, batch, seq]
  (temporal, height, width: mobius/components/mrope.py). genai computes them
  from input_ids and image_grid_thw (``vision_start_token_id`` marks an image)
  and continues them after the prompt with each row's rope delta.

config.json: transformers 5 nests the decoder in ``text_config`` (RoPE in
``rope_parameters`` with ``mrope_section``); 4.x keeps it at the top level with
``rope_scaling: {"type": "mrope", ...}``. Both are read; the ArchitectureConfig
describes the decoder, ``config.options`` (QwenVLOptions) the normalized
``vision_config``, ``mrope_section`` and token ids.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.components.lm_head import LMHead
from mobius.components.mrope import STREAMS, MRotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models.family import ModelFamily
from mobius.models.llama import LlamaForCausalLM
from mobius.models.qwen2_5_vl_vision import QwenVisionConfig, QwenVisionTransformer
from mobius.tasks import genai_image_settings as settings
from mobius.tasks import image_processor, vision_language
from mobius.tasks.task import TensorSpec
from mobius.tiny.bases import COMMON, VOCAB_SIZE

#: Qwen2_5_VLConfig's own defaults (transformers).
_VL_DEFAULTS: Mapping[str, Any] = {
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
}
_SECTIONS = ("text_config", "vision_config")
#: genai's image processor configuration (genai_config ``model.vision.config_filename``)
PROCESSOR_FILE = "processor_config.json"
#: Qwen2VLImageProcessor's normalization (OpenAI CLIP's)
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


@dataclasses.dataclass(frozen=True)
class QwenVLOptions:
    """What the Qwen-VL modules read from the normalized config (normalize_qwen_vl)."""

    mrope_section: tuple[int, ...] = ()
    vision_config: dict | None = None
    image_token_id: int = _VL_DEFAULTS["image_token_id"]
    video_token_id: int = _VL_DEFAULTS["video_token_id"]
    vision_start_token_id: int = _VL_DEFAULTS["vision_start_token_id"]


def normalize_qwen2_5_vl(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder's fields at the top level with plain RoPE parameters and
    ``mrope_section``; the token ids; the vision_config with its defaults."""
    vision = QwenVisionConfig.from_dict(raw.get("vision_config") or {})
    return normalize_qwen_vl(raw, "qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration",
                             vision_dict(vision))


def normalize_qwen_vl(raw: Mapping[str, Any], model_type: str, architecture: str,
                      vision: dict[str, Any], default_section: list[int] | None = None,
                      ) -> dict[str, Any]:
    """What Qwen2.5-VL and Qwen3-VL share: text_config (or the 4.x top level)
    flattened, rope parameters plain + ``mrope_section`` (``default_section`` when
    config.json has none), token ids, tie_word_embeddings, the checked vision dict."""
    text = {**{k: v for k, v in raw.items() if k not in _SECTIONS}, **(raw.get("text_config") or {})}
    rope = dict(text.pop("rope_parameters", None) or text.pop("rope_scaling", None) or {})
    text.pop("rope_scaling", None)
    rope.pop("mrope_interleaved", None)  # transformers' Qwen3-VL always interleaves
    section = rope.pop("mrope_section", text.get("mrope_section")) or default_section
    if not section:
        raise ConfigError(f"config.json: {model_type} needs rope_parameters.mrope_section")
    kind = rope.pop("type", rope.pop("rope_type", "default"))
    if kind not in ("default", "mrope"):
        raise UnsupportedModelError(f"{model_type}: rope type {kind!r} with M-RoPE is not "
                                    f"supported; supported: default / mrope")
    if text.get("use_sliding_window"):
        raise UnsupportedModelError(f"{model_type}: use_sliding_window is not supported")
    ids = {key: raw.get(key, text.get(key, default)) for key, default in _VL_DEFAULTS.items()}
    tie = bool(raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    return {**text, **ids, "model_type": model_type,
            "architectures": list(raw.get("architectures") or [architecture]),
            "rope_parameters": {**rope, "rope_type": "default"},
            "mrope_section": [int(s) for s in section], "use_sliding_window": False,
            "tie_word_embeddings": tie, "vision_config": vision}


def vision_dict(vision: QwenVisionConfig) -> dict[str, Any]:
    out = {key: getattr(vision, key) for key in QwenVisionConfig.__dataclass_fields__}
    out["fullatt_block_indexes"] = list(vision.fullatt_block_indexes)
    return out


class Qwen2_5_VLTextModel(LlamaForCausalLM):
    """The Qwen2 decoder reading M-RoPE position streams [3, batch, seq]."""

    position_streams = STREAMS

    def __init__(self, config: ArchitectureConfig):
        super().__init__(config)
        self.model.rotary_emb_default = MRotaryEmbedding(config.rope,
                                                         config.options.mrope_section)


class Qwen2_5_VLForConditionalGeneration(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py.
    Qwen3-VL (mobius/models/qwen3_vl.py) changes the class attributes below."""

    vision_config_class = QwenVisionConfig
    vision_class = QwenVisionTransformer
    text_class = Qwen2_5_VLTextModel
    #: genai's image processor: its name, the Normalize step's mean, std and flag
    processor = ("qwen2_5_image_processor", CLIP_MEAN, CLIP_STD, "qwen2_5_vl")
    #: the resize's [min_pixels, max_pixels]
    pixel_bounds = (56 * 56, 28 * 28 * 1280 * 16)
    #: the options' token ids, each checked against the vocabulary
    token_keys = tuple(_VL_DEFAULTS)

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        options = config.options
        vision = self.vision_config_class.from_dict(options.vision_config)
        if vision.out_hidden_size != config.hidden_size:
            raise ConfigError(f"config.json: vision_config out_hidden_size "
                              f"{vision.out_hidden_size} != text hidden_size {config.hidden_size}")
        self.token_ids = {key: getattr(options, key) for key in self.token_keys}
        for key, value in self.token_ids.items():
            if not 0 <= value < config.vocab_size:
                raise ConfigError(f"{config.model_type}: {key} {value} is outside the "
                                  f"vocabulary (vocab_size {config.vocab_size})")
        self.vision = vision
        self.image_token_id = options.image_token_id
        self.hidden_size = config.hidden_size
        self.vision_inputs = (
            TensorSpec("pixel_values", None, (vision_language.NUM_PATCHES, vision.patch_dim)),
            TensorSpec("image_grid_thw", ir.DataType.INT64, (vision_language.NUM_IMAGES, 3)))
        self.visual = self.vision_class(vision)
        self.language_model = self.text_class(config)
        if config.tie_word_embeddings:
            # embedding.onnx and model.onnx each hold their own copy of the table
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")

    def encode_images(self, op, pixel_values, image_grid_thw):
        return self.visual(op, pixel_values, image_grid_thw)

    def embed(self, op, input_ids, image_features):
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        embeds = self.language_model.model.embed_tokens(op, token_ids)  # [batch, seq, hidden]
        return merge_image_features(op, is_image, embeds, image_features, self.hidden_size)

    def genai_model_config(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """What genai's qwen2_5_vl position and vision code read besides the defaults."""
        vision = self.vision
        return {
            "video_token_id": self.token_ids["video_token_id"],
            "vision_start_token_id": self.token_ids["vision_start_token_id"],
            "vision": {"spatial_merge_size": vision.spatial_merge_size,
                       "patch_size": vision.patch_size, "config_filename": PROCESSOR_FILE,
                       **self.genai_vision_extras()},
        }

    def genai_vision_extras(self) -> dict[str, Any]:
        vision = self.vision
        return {"window_size": vision.window_size, "tokens_per_second": vision.tokens_per_second}

    def pixel_range(self, preprocessor: Mapping[str, Any]) -> tuple[int, int]:
        """[min_pixels, max_pixels] of the resize: the checkpoint's (top-level keys
        first, as transformers reads them, then size's shortest / longest edge),
        else ``pixel_bounds``; settings genai's processor has no switch for fail."""
        vision = self.vision
        settings.require(preprocessor, {
            "do_resize": True, "do_rescale": True, "do_normalize": True,
            "do_convert_rgb": True, "patch_size": vision.patch_size,
            "merge_size": vision.spatial_merge_size,
            "temporal_patch_size": vision.temporal_patch_size}, "Qwen image processor")
        bounds = []
        for key, edge, default in (("min_pixels", "shortest_edge", self.pixel_bounds[0]),
                                   ("max_pixels", "longest_edge", self.pixel_bounds[1])):
            value = preprocessor.get(key)
            value = settings.size_entry(preprocessor, edge) if value is None else value
            bounds.append(settings.number({key: default if value is None else value}, key,
                                          default, integer=True))
        if bounds[0] > bounds[1]:
            raise ConfigError(f"{image_processor.FILE}: min_pixels {bounds[0]} exceeds "
                              f"max_pixels {bounds[1]}")
        return bounds[0], bounds[1]

    def genai_processor_files(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """genai's image processor (onnxruntime-extensions steps), as transformers'
        Qwen2VLImageProcessor with the checkpoint's preprocessor_config.json settings
        (the family's where it has none): decode, RGB, resize to a multiple of
        patch * merge within [min_pixels, max_pixels], rescale, normalize (Qwen2.5-VL:
        CLIP mean/std; Qwen3-VL: 0.5), then cut into the flattened patches the vision
        model takes."""
        vision = self.vision
        name, mean, std, flag = self.processor
        low, high = self.pixel_range(preprocessor)
        steps = [
            ("decode_image", "DecodeImage", {"color_space": "RGB"}),
            ("convert_to_rgb", "ConvertRGB", None),
            ("resize", "Resize", {"width": 540, "height": 360, "smart_resize": 1,
                                  "min_pixels": low, "max_pixels": high,
                                  "patch_size": vision.patch_size,
                                  "merge_size": vision.spatial_merge_size}),
            ("rescale", "Rescale", {"rescale_factor": settings.number(
                preprocessor, "rescale_factor", 1 / 255)}),
            ("normalize", "Normalize", {"mean": settings.triple(preprocessor, "image_mean", mean),
                                        "std": settings.triple(preprocessor, "image_std", std),
                                        flag: 1}),
            ("patch_image", "PatchImage", {"patch_size": vision.patch_size,
                                           "temporal_patch_size": vision.temporal_patch_size,
                                           "merge_size": vision.spatial_merge_size}),
        ]
        transforms = [{"operation": {"name": name, "type": kind, **({"attrs": attrs} if attrs else {})}}
                      for name, kind, attrs in steps]
        return {PROCESSOR_FILE: {"processor": {"name": name, "transforms": transforms}}}


#: the module's names <- transformers 4.x (language_model.*, visual.*) and 5.x
#: (model.language_model.*, model.visual.*) checkpoints; Qwen3-VL's too
QWEN_VL_CHECKPOINT_ALIASES = (
    ("visual.", ("visual.", "model.visual.")),
    ("language_model.model.", ("language_model.model.", "model.language_model.", "model.")),
    ("language_model.lm_head.", ("language_model.lm_head.", "lm_head.")),
)


FAMILY = ModelFamily(
    name="qwen2_5_vl",
    model_types=("qwen2_5_vl",),
    architectures=("Qwen2_5_VLForConditionalGeneration",),
    module=Qwen2_5_VLForConditionalGeneration,
    task=vision_language.TASK,
    tiny_preset="tiny-qwen2_5_vl",
    normalize_raw=normalize_qwen2_5_vl,
    config_overrides=lambda raw: {"qkv_bias": True, "o_bias": False},
    options=QwenVLOptions,
    checkpoint_aliases=QWEN_VL_CHECKPOINT_ALIASES,
)

#: the text decoder of the Qwen-VL presets (M-RoPE: no top-level rope_theta)
QWEN_VL_TEXT = {k: v for k, v in COMMON.items() if k != "rope_theta"}
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-qwen2_5_vl": {
        "model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "image_token_id": VOCAB_SIZE - 1, "video_token_id": VOCAB_SIZE - 2,
        "vision_start_token_id": VOCAB_SIZE - 3, "vision_end_token_id": VOCAB_SIZE - 4,
        "tie_word_embeddings": False,
        "text_config": {**QWEN_VL_TEXT, "model_type": "qwen2_5_vl_text",
                        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                            "mrope_section": [2, 3, 3]}},
        "vision_config": {
            "model_type": "qwen2_5_vl_vision", "depth": 2, "hidden_size": 32,
            "intermediate_size": 40, "num_heads": 2, "in_channels": 3, "patch_size": 4,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 16,
            "fullatt_block_indexes": [1], "out_hidden_size": 64, "tokens_per_second": 4,
            "hidden_act": "silu",
        },
    },
}
