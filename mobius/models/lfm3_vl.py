"""LFM3-VL (Lfm3VlForConditionalGeneration, model_type "lfm3_vl"): LFM3-VL's own vision
tower (mobius/models/lfm3_vl_vision.py), a merge-block projector and the LFM3 hybrid
decoder (mobius/models/lfm3.py), as the three models of mobius/tasks/vision_language.py:

* ``vision``: pixel_values [patches, channels * temporal_patch * patch^2] (each
  spatial_merge^2 block consecutive, as Qwen's processors cut them) and image_grid_thw
  [images, 3] -> image_features [patches / spatial_merge^2, text hidden]: the tower's
  last hidden state, LayerNorm (eps 1e-6) per patch, each block's spatial_merge^2 patches
  concatenated, then linear_1, projector_hidden_act, linear_2 (biased with
  projector_bias).
* ``embedding``: LFM3's token embedding with ``image_token_id`` positions replaced by
  the features (mobius/components/image_tokens.py).
* ``model``: the LFM3 decoder fed inputs_embeds; 1-D positions (transformers 5 gives the
  text no 3-D positions), conv layers carry past_key_values.{i}.conv / present.{i}.conv.

Differences from LFM2-VL (mobius/models/lfm2_vl.py): no SigLIP2 NaFlex tower (padded
[images, patches, C * p^2] + mask + spatial_shapes) but flattened Qwen-style patches
with a temporal patch and grid_thw; the projector merges blocks in the processor's patch
order, normalizing each patch before the merge (no projector_use_layernorm, no
downsample_factor: spatial_merge_size is the vision config's); the image is wrapped in
vision_start / vision_end tokens; tiling is the Qwen3-VL processor's smart resize, not
LFM2-VL's tiles and thumbnail. Videos (video_token_id, pixel_values_videos) are not built.

onnxruntime-genai 0.18 cannot run this package: model.type is "lfm3_vl", which it does
not know, and its ``lfm2_vl`` type would not fit: that type's processor hands the vision
model SigLIP2 NaFlex patches (pixel_values [images, patches, C * p^2], a patch mask and
spatial_shapes, no temporal patch, row-major) and wraps images in <|image_start|> /
<|image_end|>, while this tower needs merge-block-ordered patches with a temporal patch
and image_grid_thw. So it is tested with onnxruntime only (lfm3_vl_parity_test.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.lm_head import LMHead
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import lfm3
from mobius.models.family import ModelFamily
from mobius.models.lfm3_vl_vision import Lfm3VisionConfig, Lfm3VisionModel
from mobius.tasks import vision_language
from mobius.tasks.task import TensorSpec
from mobius.tiny.bases import VOCAB_SIZE

TOKEN_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id",
              "vision_end_token_id")


@dataclasses.dataclass(frozen=True)
class Lfm3VlOptions(lfm3.Lfm3Options):
    """config.json switches: the LFM3 decoder's, then transformers' Lfm3VlConfig defaults."""

    image_token_id: int = 125_030
    video_token_id: int = 125_029
    vision_start_token_id: int = 125_009
    vision_end_token_id: int = 125_010
    projector_hidden_act: str = "gelu"
    projector_hidden_size: int = 4096
    projector_bias: bool = True
    vision_config: dict | None = None


def normalize_lfm3_vl(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The LFM3 decoder's fields at the top level (mobius/models/lfm3.py), plus the
    LFM3-VL switches and the ``text_config`` / ``vision_config`` sections."""
    text = dict(raw.get("text_config") or {})
    if text.get("model_type", "lfm3") != "lfm3":
        raise UnsupportedModelError(f"lfm3_vl: text_config model_type {text['model_type']!r} "
                                    f"is not supported; supported: lfm3")
    vision = dict(raw.get("vision_config") or {})
    if vision.get("model_type", "lfm3_vl_vision") != "lfm3_vl_vision":
        raise UnsupportedModelError(f"lfm3_vl: vision tower {vision['model_type']!r} is not "
                                    f"supported; supported: lfm3_vl_vision")
    top = {k: raw[k] for k in (*TOKEN_KEYS, "projector_hidden_act", "projector_hidden_size",
                               "projector_bias") if k in raw}
    tie = raw.get("tie_word_embeddings")
    out = {**lfm3.normalize_lfm3({**text, "model_type": "lfm3"}), **top,
           "model_type": "lfm3_vl",
           "architectures": list(raw.get("architectures") or ["Lfm3VlForConditionalGeneration"]),
           "tie_word_embeddings": True if tie is None else bool(tie),
           "text_config": text, "vision_config": vision}
    for key in ("dtype", "torch_dtype"):
        if raw.get(key) is not None:
            out[key] = raw[key]
    return out


class Lfm3VlMultiModalProjector(nn.Module):
    """[1, patches, vision hidden] -> [patches / merge^2, text hidden]."""

    def __init__(self, o: Lfm3VlOptions, vision: Lfm3VisionConfig, text_hidden: int):
        super().__init__()
        self.merged = vision.hidden_size * vision.spatial_merge_size**2
        self.act = o.projector_hidden_act
        self.layer_norm = LayerNorm(vision.hidden_size, 1e-6)
        self.linear_1 = Linear(self.merged, o.projector_hidden_size, o.projector_bias)
        self.linear_2 = Linear(o.projector_hidden_size, text_hidden, o.projector_bias)

    def forward(self, op, x):
        x = op.Reshape(self.layer_norm(op, x), op.Constant(value_ints=[-1, self.merged]))
        return self.linear_2(op, apply_activation(op, self.linear_1(op, x), self.act))


class Lfm3VlForConditionalGeneration(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        o = self.options = config.options
        positive_int("projector_hidden_size", o.projector_hidden_size)
        for key in TOKEN_KEYS:
            if not 0 <= getattr(o, key) < config.vocab_size:
                raise ConfigError(f"lfm3_vl: {key} {getattr(o, key)} is outside the "
                                  f"vocabulary (vocab_size {config.vocab_size})")
        vision = self.vision = Lfm3VisionConfig.from_dict(o.vision_config or {})
        self.hidden_size, self.image_token_id = config.hidden_size, o.image_token_id
        self.vision_inputs = (
            TensorSpec("pixel_values", None, (vision_language.NUM_PATCHES, vision.patch_dim)),
            TensorSpec("image_grid_thw", ir.DataType.INT64, (vision_language.NUM_IMAGES, 3)))
        self.vision_tower = Lfm3VisionModel(vision)
        self.multi_modal_projector = Lfm3VlMultiModalProjector(o, vision, config.hidden_size)
        self.language_model = lfm3.Lfm3ForCausalLM(config)
        if config.tie_word_embeddings:  # the head's own copy (the lookup is in embedding.onnx)
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")

    def encode_images(self, op, pixel_values, image_grid_thw):
        hidden = self.vision_tower(op, pixel_values, image_grid_thw)
        return self.multi_modal_projector(op, hidden)

    def embed(self, op, input_ids, image_features):
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        embeds = self.language_model.model.embed_tokens(op, token_ids)
        return merge_image_features(op, is_image, embeds, image_features, self.hidden_size)


FAMILY = ModelFamily(
    name="lfm3_vl",
    model_types=("lfm3_vl",),
    architectures=("Lfm3VlForConditionalGeneration",),
    module=Lfm3VlForConditionalGeneration,
    task=vision_language.TASK,
    tiny_preset="tiny-lfm3-vl",
    normalize_raw=normalize_lfm3_vl,
    config_overrides=lfm3._overrides,
    options=Lfm3VlOptions,
    checkpoint_aliases=(
        ("vision_tower.", ("model.vision_tower.", "vision_tower.")),
        ("multi_modal_projector.", ("model.multi_modal_projector.", "multi_modal_projector.")),
        ("language_model.model.", ("model.language_model.", "language_model.model.")),
        # lfm3.py names its feed-forward weights absolutely
        ("model.layers.", ("model.language_model.layers.", "language_model.model.layers.")),
        ("language_model.lm_head.", ("lm_head.", "language_model.lm_head.")),
    ),
)

# LFM3-VL: the tiny-lfm3 decoder (conv, sliding, full, conv), a 3-layer tower (the default
# pattern: conv, conv, attention; hidden 32, 2 query heads of 16 over 1 key/value head,
# SwiGLU 40, kernel 3) on 2 x 2 px patches with 2 frames per temporal patch, 2 x 2 merge
# blocks, projector hidden 48. Image / video / vision end / start: the vocabulary's last.
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-lfm3-vl": {
        "model_type": "lfm3_vl", "architectures": ["Lfm3VlForConditionalGeneration"],
        "image_token_id": VOCAB_SIZE - 1, "video_token_id": VOCAB_SIZE - 2,
        "vision_end_token_id": VOCAB_SIZE - 3, "vision_start_token_id": VOCAB_SIZE - 4,
        "tie_word_embeddings": True, "projector_hidden_size": 48,
        "projector_hidden_act": "gelu", "projector_bias": True,
        "text_config": {k: v for k, v in lfm3.TINY_PRESETS["tiny-lfm3"].items()
                        if k != "architectures"},
        "vision_config": {
            "model_type": "lfm3_vl_vision", "hidden_size": 32, "intermediate_size": 40,
            "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
            "in_channels": 3, "patch_size": 2, "temporal_patch_size": 2,
            "spatial_merge_size": 2, "conv_kernel_size": 3, "norm_eps": 1e-5,
            "rope_parameters": {"rope_type": "axial", "rope_theta": 100.0},
        },
    },
}
