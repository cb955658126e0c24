"""Mistral 3 vision-language (Mistral3ForConditionalGeneration, model_type "mistral3"):
the Pixtral vision tower (mobius/models/pixtral_vision.py), Mistral3's projector and
a Mistral decoder, built as the three models of mobius/tasks/vision_language.py in
the layout onnxruntime-genai's ``mistral3`` type runs:

* ``vision``: pixel_values [images, C, H, W], H and W dynamic multiples of
  patch_size * spatial_merge_size (genai crops each image out of its padded batch
  with ``image_sizes`` and runs the model once per image) -> hidden state
  ``vision_feature_layer`` -> RMSNorm -> patch merger (each spatial_merge x
  spatial_merge block of patches, concatenated as transformers' ``unfold`` orders
  them, -> ``merging_layer``) -> linear_1, ``projector_hidden_act``, linear_2
  -> image_features [images * (rows / merge) * (cols / merge), text hidden].
* ``embedding``: the token embedding with each ``[IMG]`` (``image_token_index``)
  position replaced by the features in order; ``[IMG_BREAK]`` / ``[IMG_END]``
  (after each row of merged patches) are ordinary tokens.
* ``model``: the Mistral (or Llama) decoder fed inputs_embeds.

Checkpoint names: hub checkpoints (transformers 4.x) use ``vision_tower.``,
``multi_modal_projector.``, ``language_model.model.`` / ``language_model.lm_head.``;
transformers 5 saves ``model.vision_tower.``, ``model.multi_modal_projector.``,
``model.language_model.`` and ``lm_head.``. transformers 5 ties lm_head to the
token embedding by the top-level ``tie_word_embeddings`` (default true; the text
config's own flag is not read) unless the checkpoint holds a different lm_head.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.components.linear import Linear
from mobius.components.lm_head import LMHead
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import llama, mistral
from mobius.models.clip import hidden_state_index
from mobius.models.family import ModelFamily
from mobius.models.pixtral_vision import PixtralConfig, PixtralVisionModel
from mobius.models.vision_parts import VLM_CHECKPOINT_ALIASES
from mobius.tasks import genai_image_settings as settings
from mobius.tasks import image_processor, vision_language
from mobius.tasks.task import TensorSpec
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import COMMON, VOCAB_SIZE

TEXT_FAMILIES: Mapping[str, ModelFamily] = {"mistral": mistral.FAMILY, "llama": llama.FAMILY}
#: Mistral3Config's text_config defaults (transformers), for text configs saved as diffs
_TEXT_DEFAULTS: Mapping[str, Any] = {
    "model_type": "mistral", "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
    "intermediate_size": 32768, "max_position_embeddings": 131072, "num_attention_heads": 32,
    "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-5,
    "rope_theta": 1000000000.0, "sliding_window": None, "vocab_size": 131072,
}
_MISTRAL3_DEFAULTS: Mapping[str, Any] = {
    "image_token_index": 10, "projector_hidden_act": "gelu", "vision_feature_layer": -1,
    "multimodal_projector_bias": False, "spatial_merge_size": 2,
}


@dataclasses.dataclass(frozen=True)
class Mistral3Options:
    """What the module reads from the normalized config (normalize_mistral3)."""

    text_config: dict | None = None
    vision_config: dict | None = None
    image_token_index: int = _MISTRAL3_DEFAULTS["image_token_index"]
    projector_hidden_act: str = _MISTRAL3_DEFAULTS["projector_hidden_act"]
    vision_feature_layer: int | tuple[int, ...] = _MISTRAL3_DEFAULTS["vision_feature_layer"]
    multimodal_projector_bias: bool = _MISTRAL3_DEFAULTS["multimodal_projector_bias"]
    spatial_merge_size: int = _MISTRAL3_DEFAULTS["spatial_merge_size"]


#: checkpoint name of a tied head: transformers 5 ties it to the token embedding only
#: where the checkpoint holds no lm_head of its own (hub checkpoints saved by 4.x keep
#: one and no tie_word_embeddings key), so its lm_head is read where there is one
TIED_HEAD = "tied_lm_head."
#: genai's image processor configuration (genai_config ``model.vision.config_filename``)
PROCESSOR_FILE = "processor_config.json"
#: PixtralImageProcessor's normalization (OpenAI CLIP's)
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def normalize_mistral3(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder's fields at the top level, the Mistral 3 keys, and the
    normalized ``text_config`` / ``vision_config``."""
    text = {**_TEXT_DEFAULTS, **(raw.get("text_config") or {})}
    if text["model_type"] not in TEXT_FAMILIES:
        raise UnsupportedModelError(f"mistral3: text_config model_type {text['model_type']!r} "
                                    f"is not supported; supported: {', '.join(TEXT_FAMILIES)}")
    vision = PixtralConfig.from_dict(raw.get("vision_config") or {}).as_dict()
    own = {key: raw.get(key, default) for key, default in _MISTRAL3_DEFAULTS.items()}
    if raw.get("image_token_id") is not None and raw.get("image_token_index") is None:
        own["image_token_index"] = raw["image_token_id"]  # transformers 5 attribute name
    out = {**text, **own, "model_type": "mistral3",
           "architectures": list(raw.get("architectures") or ["Mistral3ForConditionalGeneration"]),
           "tie_word_embeddings": bool(raw.get("tie_word_embeddings", True)),
           "text_config": text, "vision_config": vision}
    for key in ("pad_token_id", "dtype", "torch_dtype"):  # top-level values win
        if raw.get(key) is not None:
            out[key] = raw[key]
    return out


def _text_overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    text = raw["text_config"]
    return dict(TEXT_FAMILIES[text["model_type"]].config_overrides(text))


def feature_layer(options: Mistral3Options, vision: PixtralConfig) -> int:
    """The Pixtral hidden-state index (0..layers) ``vision_feature_layer`` selects."""
    layer = options.vision_feature_layer
    if isinstance(layer, tuple):
        if len(layer) != 1:  # transformers' projector norm takes one layer's width
            raise ConfigError(f"mistral3: vision_feature_layer {list(layer)} lists several "
                              f"layers; the Mistral 3 projector takes one")
        layer = layer[0]
    return hidden_state_index(layer, vision.num_hidden_layers)


class Mistral3PatchMerger(nn.Module):
    """[images, rows * cols, d] -> [images * rows/m * cols/m, d]: each m x m block of
    patches (a trailing odd row / column dropped) concatenated channel-major, then
    ``merging_layer``."""

    def __init__(self, hidden: int, merge: int):
        super().__init__()
        self.hidden, self.merge = hidden, merge
        self.merging_layer = Linear(hidden * merge * merge, hidden)

    def forward(self, op, x, rows, cols):
        m, d = self.merge, self.hidden

        def dim(value):
            return op.Unsqueeze(value, op.Constant(value_ints=[0]))

        block_rows, block_cols = op.Div(rows, op.Constant(value_int=m)), op.Div(
            cols, op.Constant(value_int=m))
        grid = op.Reshape(x, op.Concat(op.Constant(value_ints=[-1]), dim(rows), dim(cols),
                                       op.Constant(value_ints=[d]), axis=0))
        ends = op.Concat(dim(op.Mul(block_rows, op.Constant(value_int=m))),
                         dim(op.Mul(block_cols, op.Constant(value_int=m))), axis=0)
        grid = op.Slice(grid, op.Constant(value_ints=[0, 0]), ends, op.Constant(value_ints=[1, 2]))
        blocks = op.Reshape(grid, op.Concat(
            op.Constant(value_ints=[-1]), dim(block_rows), op.Constant(value_ints=[m]),
            dim(block_cols), op.Constant(value_ints=[m, d]), axis=0))
        blocks = op.Transpose(blocks, perm=[0, 1, 3, 5, 2, 4])  # [n, R, C, d, m, m]
        merged = op.Reshape(blocks, op.Constant(value_ints=[-1, d * m * m]))
        return self.merging_layer(op, merged)


class Mistral3MultiModalProjector(nn.Module):
    def __init__(self, vision: PixtralConfig, text_hidden: int, eps: float,
                 options: Mistral3Options):
        super().__init__()
        bias = options.multimodal_projector_bias
        self.activation = options.projector_hidden_act
        self.norm = RMSNorm(vision.hidden_size, eps)
        self.patch_merger = Mistral3PatchMerger(vision.hidden_size, options.spatial_merge_size)
        self.linear_1 = Linear(vision.hidden_size, text_hidden, bias)
        self.linear_2 = Linear(text_hidden, text_hidden, bias)

    def forward(self, op, hidden, rows, cols):
        merged = self.patch_merger(op, self.norm(op, hidden), rows, cols)
        return self.linear_2(op, apply_activation(op, self.linear_1(op, merged), self.activation))


class Mistral3ForConditionalGeneration(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        options = config.options
        vision = PixtralConfig.from_dict(options.vision_config)
        self.merge = positive_int("spatial_merge_size", options.spatial_merge_size)
        self.vision, self.feature_state = vision, feature_layer(options, vision)
        self.image_token_id = options.image_token_index
        if not 0 <= self.image_token_id < config.vocab_size:
            raise ConfigError(f"mistral3: image_token_index {self.image_token_id} is outside "
                              f"the vocabulary (vocab_size {config.vocab_size})")
        self.hidden_size = config.hidden_size
        self.vision_inputs = (TensorSpec("pixel_values", None, (
            vision_language.NUM_IMAGES, vision.num_channels, vision_language.IMAGE_HEIGHT,
            vision_language.IMAGE_WIDTH)),)
        self.vision_tower = PixtralVisionModel(vision, num_layers=self.feature_state)
        self.multi_modal_projector = Mistral3MultiModalProjector(
            vision, config.hidden_size, config.rms_norm_eps, options)
        self.language_model = TEXT_FAMILIES[options.text_config["model_type"]].module(config)
        if config.tie_word_embeddings:  # the head's own copy (the lookup is in embedding.onnx)
            self.language_model.lm_head = LMHead(config.hidden_size, config.vocab_size,
                                                 checkpoint_name=TIED_HEAD + "weight")

    def encode_images(self, op, pixel_values):
        """pixel_values [images, C, H, W] -> image_features [images * merged patches, hidden]."""
        states, (rows, cols) = self.vision_tower(op, pixel_values)
        return self.multi_modal_projector(op, states[self.feature_state], rows, cols)

    def embed(self, op, input_ids, image_features):
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        embeds = self.language_model.model.embed_tokens(op, token_ids)
        return merge_image_features(op, is_image, embeds, image_features, self.hidden_size)

    def genai_model_config(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """What genai's mistral3 processor and per-image vision loop read."""
        return {"vision": {"patch_size": self.vision.patch_size,
                           "spatial_merge_size": self.merge, "config_filename": PROCESSOR_FILE}}

    def longest_edge(self, preprocessor: Mapping[str, Any]) -> int:
        """The resize's longest edge: the checkpoint's size.longest_edge, else the
        tower's image_size (its positions go no further); settings genai's processor
        has no switch for fail."""
        settings.require(preprocessor, {"do_resize": True, "do_rescale": True,
                                        "do_normalize": True}, "Pixtral image processor")
        edge = settings.size_entry(preprocessor, "longest_edge")
        edge = settings.number({"longest_edge": self.vision.image_size if edge is None else edge},
                               "longest_edge", 0, integer=True)
        if edge > self.vision.image_size:
            raise ConfigError(f"{image_processor.FILE}: size longest_edge {edge} exceeds the "
                              f"vision tower's image_size {self.vision.image_size}")
        return edge

    def genai_processor_files(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """genai's Pixtral image processor (onnxruntime-extensions steps): decode as RGB
        (no ConvertRGB step: it swaps the channels unconditionally, so after an RGB
        decode it would hand the model BGR), resize to multiples of patch * merge
        within the longest edge, rescale, normalize (the checkpoint's
        preprocessor_config.json, default 1/255 and CLIP mean/std), channels first,
        then the per-image sizes genai splits the batch by."""
        vision, side = self.vision, self.vision.patch_size * self.merge
        edge = self.longest_edge(preprocessor)
        steps = [
            ("decode_image", "DecodeImage", {"color_space": "RGB"}),
            ("resize", "Resize", {"height": edge, "width": edge,
                                  "smart_resize": 1, "min_pixels": side * side,
                                  "max_pixels": edge ** 2,
                                  "patch_size": vision.patch_size, "merge_size": self.merge}),
            ("rescale", "Rescale", {"rescale_factor": settings.number(
                preprocessor, "rescale_factor", 1 / 255)}),
            ("normalize", "Normalize", {
                "mean": settings.triple(preprocessor, "image_mean", CLIP_MEAN),
                "std": settings.triple(preprocessor, "image_std", CLIP_STD)}),
            ("to_channel_first", "Permute3D", {"dims": [2, 0, 1]}),
            ("pixtral_image_sizes", "PixtralImageSizes", None),
        ]
        transforms = [{"operation": {"name": name, "type": kind,
                                     **({"attrs": attrs} if attrs else {})}}
                      for name, kind, attrs in steps]
        return {PROCESSOR_FILE: {"processor": {"name": "pixtral_image_processor",
                                               "transforms": transforms}}}


def _unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    """The vision layers past the one ``vision_feature_layer`` reads."""
    vision = PixtralConfig.from_dict(config.options.vision_config)
    first = feature_layer(config.options, vision)
    layers = "|".join(str(i) for i in range(first, vision.num_hidden_layers))
    ignored = ()
    if layers:
        reason = "mistral3 reads Pixtral hidden states up to vision_feature_layer only"
        ignored += (IgnoredTensors(
            rf"(model\.)?vision_tower\.transformer\.layers\.({layers})\..*", reason),)
    return ignored


FAMILY = ModelFamily(
    name="mistral3",
    model_types=("mistral3",),
    architectures=("Mistral3ForConditionalGeneration",),
    module=Mistral3ForConditionalGeneration,
    task=vision_language.TASK,
    tiny_preset="tiny-mistral3",
    normalize_raw=normalize_mistral3,
    config_overrides=_text_overrides,
    options=Mistral3Options,
    ignored_tensors=_unread,
    checkpoint_aliases=(
        ("vision_tower.", ("vision_tower.", "model.vision_tower.")),
        *VLM_CHECKPOINT_ALIASES[1:],  # LLaVA's projector / language model names
        (TIED_HEAD, ("language_model.lm_head.", "lm_head.", "language_model.model.embed_tokens.",
                     "model.language_model.embed_tokens.")),
    ),
)

# Mistral 3 (mobius/models/mistral3.py): the common decoder as Mistral (head_dim 16, no
# sliding window) + a 2-layer Pixtral tower (hidden 48, 4 heads of 12, MLP 100, 4 px
# patches, images up to 64 px) and a 2 x 2 patch merger. [IMG] / [IMG_BREAK] /
# [IMG_END] / [INST] are the vocabulary's last four ids.
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-mistral3": {
        "model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
        "image_token_index": VOCAB_SIZE - 1, "spatial_merge_size": 2,
        "projector_hidden_act": "gelu", "vision_feature_layer": -1,
        "multimodal_projector_bias": False, "tie_word_embeddings": False,
        "text_config": {**COMMON, "model_type": "mistral", "head_dim": 16, "sliding_window": None},
        "vision_config": {
            "model_type": "pixtral", "hidden_size": 48, "intermediate_size": 100,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_channels": 3,
            "image_size": 64, "patch_size": 4, "hidden_act": "gelu",
            "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
        },
    },
}
