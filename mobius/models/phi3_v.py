"""Phi-3-vision / Phi-3.5-vision (Phi3VForCausalLM, model_type "phi3_v"), built as the
vision / embedding / decoder models of onnxruntime-genai's ``phi3v`` type.

The hub checkpoints ship their modeling code (auto_map) and transformers has no class
for them; mobius reads config.json and the tensors only:

* ``vision``: the HD image path of mobius/models/phi3v_vision.py (pixel_values,
  image_sizes -> image_features).
* ``embedding``: ``model.embed_tokens`` of input_ids, with every negative id (genai's
  and the hub processor's placeholder: image i's tokens are -i) replaced, in order, by
  the image features, as the checkpoint's code does for ids in (-1e9, 0).
* ``model``: the Phi-3 decoder (mobius/models/phi3.py: fused qkv / gate_up, LongRoPE,
  4.x's "su" spelling) fed inputs_embeds.

config.json: ``img_processor`` (``model_name`` must be the CLIP ViT-L/14-336 the code
hard-wires; ``image_dim_out``, ``num_img_tokens``, ``layer_idx``, ``type_feature``) and
``embd_layer`` (``use_hd_transform``, ``with_learnable_separator``,
``hd_transform_order``, ``projection_cls``), defaulted as the checkpoint's code
defaults them; every value its code cannot run with images is refused.
preprocessor_config.json ``num_crops`` must be genai's fixed 16 (Phi-3-vision's; a
processor set to 4, as Phi-3.5-vision ships for multi-frame use, is refused: genai would
crop differently). mobius' own tiny
checkpoints shrink the tower through ``img_processor.clip_config`` (CLIPVisionConfig
fields over ViT-L/14-336's), which no hub checkpoint has.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.image_tokens import merge_image_features
from mobius.components.lm_head import LMHead
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import reject
from mobius.errors import ConfigError
from mobius.models.clip import CLIPVisionConfig, hidden_state_index
from mobius.models.family import ModelFamily
from mobius.models.phi3 import Phi3ForCausalLM
from mobius.models.phi3v_vision import Phi3VImageEmbedding
from mobius.tasks import genai_image_settings as settings
from mobius.tasks.image_processor import FILE
from mobius.tasks import vision_language
from mobius.tasks.task import TensorSpec
from mobius.tiny.bases import COMMON
from mobius.weights.attach import IgnoredTensors, ignored_layers

CLIP_MODEL = "openai/clip-vit-large-patch14-336"
#: the tower the checkpoint's code builds for CLIP_MODEL (its fixed CLIPVisionConfig)
CLIP_L14_336: Mapping[str, Any] = {
    "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
    "num_attention_heads": 16, "num_channels": 3, "image_size": 336, "patch_size": 14,
    "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
}
#: the checkpoint code's defaults for keys config.json leaves out
IMG_PROCESSOR_DEFAULTS: Mapping[str, Any] = {"layer_idx": -2, "type_feature": "patch"}
EMBD_LAYER_DEFAULTS: Mapping[str, Any] = {
    "use_hd_transform": False, "with_learnable_separator": False,
    "hd_transform_order": "glb_sub", "projection_cls": "linear",
}
PROCESSOR_FILE = "processor_config.json"
#: the normalization genai's Phi-3 processor hard-wires (OpenAI CLIP's)
CLIP_NORMALIZATION: Mapping[str, Any] = {
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}
#: the crop count of genai's processor (and of Phi-3-vision's preprocessor_config.json)
GENAI_NUM_CROPS = 16


@dataclasses.dataclass(frozen=True)
class Phi3VOptions:
    """config.json's image sections (normalized by ``vision_settings``)."""

    img_processor: dict | None = None
    embd_layer: dict | None = None


@dataclasses.dataclass(frozen=True)
class VisionSettings:
    clip: CLIPVisionConfig
    feature_state: int  #: hidden_states index the features are read at


def vision_settings(options: Phi3VOptions) -> VisionSettings:
    """The tower and its read-out, after refusing what the checkpoint's code cannot run."""
    img = {**IMG_PROCESSOR_DEFAULTS, **(options.img_processor or {})}
    embd = {**EMBD_LAYER_DEFAULTS, **(options.embd_layer or {})}
    reject(img.get("name", "clip_vision_model") != "clip_vision_model", "phi3_v",
           f"img_processor name {img.get('name')!r} (only clip_vision_model)")
    reject(img.get("model_name", CLIP_MODEL) != CLIP_MODEL, "phi3_v",
           f"img_processor model_name {img.get('model_name')!r} (only {CLIP_MODEL})")
    reject(img["type_feature"] != "patch", "phi3_v",
           f"img_processor type_feature {img['type_feature']!r} (only 'patch')")
    reject(embd["use_hd_transform"] is not True, "phi3_v",
           "embd_layer use_hd_transform false (the checkpoint code embeds images only with it)")
    reject(embd["with_learnable_separator"] is not True, "phi3_v",
           "embd_layer with_learnable_separator false (the code requires it equal to "
           "use_hd_transform)")
    reject(embd["hd_transform_order"] != "sub_glb", "phi3_v",
           f"embd_layer hd_transform_order {embd['hd_transform_order']!r} (only 'sub_glb')")
    reject(embd["projection_cls"] != "mlp", "phi3_v",
           f"embd_layer projection_cls {embd['projection_cls']!r} with the HD transform "
           f"(only 'mlp')")
    clip = CLIPVisionConfig.from_dict(img.get("clip_config") or {}, CLIP_L14_336)
    dim_out = img.get("image_dim_out", clip.hidden_size)
    if dim_out != clip.hidden_size:
        raise ConfigError(f"phi3_v: img_processor image_dim_out {dim_out} is not the tower's "
                          f"hidden size {clip.hidden_size}")
    side = clip.image_size // clip.patch_size
    if side % 2:
        raise ConfigError(f"phi3_v: a crop of {side} x {side} patches cannot be merged 2 x 2")
    tokens = img.get("num_img_tokens", (side // 2) ** 2)
    if tokens != (side // 2) ** 2:
        raise ConfigError(f"phi3_v: img_processor num_img_tokens {tokens} is not the "
                          f"{(side // 2) ** 2} merged tokens of a crop")
    if not isinstance(img["layer_idx"], int) or isinstance(img["layer_idx"], bool):
        raise ConfigError(f"phi3_v: img_processor layer_idx must be an integer, "
                          f"got {img['layer_idx']!r}")
    return VisionSettings(clip, hidden_state_index(img["layer_idx"], clip.num_hidden_layers))


def check_raw(raw: Mapping[str, Any]) -> dict[str, Any]:
    """config.json as it is, once its image sections are known buildable (up front)."""
    vision_settings(Phi3VOptions(raw.get("img_processor"), raw.get("embd_layer")))
    return dict(raw)


class Phi3VForCausalLM(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    #: genai_config ``image_token_id``: unused by genai's phi3v type, whose processor
    #: marks image i's tokens -i (what ``embed`` replaces)
    image_token_id = -1

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        vision = vision_settings(config.options)
        self.clip, self.hidden_size = vision.clip, config.hidden_size
        self.vision_embed_tokens = Phi3VImageEmbedding(vision.clip, vision.feature_state,
                                                       config.hidden_size)
        self.language_model = Phi3ForCausalLM(config)
        if config.tie_word_embeddings:  # the head's own copy (the lookup is in embedding.onnx)
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")
        size = vision.clip.image_size
        self.vision_inputs = (
            TensorSpec("pixel_values", None, (vision_language.NUM_IMAGES,
                                              vision_language.NUM_CROPS,
                                              vision.clip.num_channels, size, size)),
            TensorSpec("image_sizes", ir.DataType.INT64, (vision_language.NUM_IMAGES, 2)),
        )

    def encode_images(self, op, pixel_values, image_sizes):
        return self.vision_embed_tokens(op, pixel_values, image_sizes)

    def embed(self, op, input_ids, image_features):
        """Negative ids above -1e9 are image tokens; they look up row 0, then take the
        features in order."""
        is_image = op.And(op.Less(input_ids, op.Constant(value_int=0)),
                          op.Greater(input_ids, op.Constant(value_int=-10**9)))
        token_ids = op.Where(is_image, op.Constant(value_int=0), input_ids)
        embeds = self.language_model.model.embed_tokens(op, token_ids)
        return merge_image_features(op, is_image, embeds, image_features, self.hidden_size)

    def genai_model_config(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        return {"type": "phi3v", "vision": {"inputs": {"pixel_values": "pixel_values",
                                                       "image_sizes": "image_sizes"}}}

    def genai_processor_files(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """onnxruntime-extensions' Phi-3 HD transform: 336 px crops, CLIP's mean / std and
        16 crops, all fixed in its code (the attrs it is given are not read), so a checkpoint
        whose processor differs (``num_crops``, mean / std, the tower's crop) is refused."""
        settings.require(preprocessor, CLIP_NORMALIZATION, "Phi-3 image processor")
        num_crops = preprocessor.get("num_crops", GENAI_NUM_CROPS)
        if num_crops != GENAI_NUM_CROPS:
            raise ConfigError(
                f"{FILE}: num_crops={num_crops!r} is not supported: onnxruntime-genai's "
                f"Phi-3 image processor always makes {GENAI_NUM_CROPS} crops (Phi-3.5-vision's "
                f"card recommends {GENAI_NUM_CROPS} for single images: set it there to build)")
        crop, patch = CLIP_L14_336["image_size"], CLIP_L14_336["patch_size"]
        if (self.clip.image_size, self.clip.patch_size) != (crop, patch):
            raise ConfigError(f"phi3_v: onnxruntime-genai's Phi-3 image processor makes {crop} "
                              f"px crops of {patch} px patches, not {self.clip.image_size} / "
                              f"{self.clip.patch_size}")
        base = crop // patch // 2
        steps = [("decode_image", "DecodeImage", {"color_space": "RGB"}),
                 ("convert_to_rgb", "ConvertRGB", None),
                 ("phi3_image_transform", "Phi3ImageTransform",
                  {"num_crops": GENAI_NUM_CROPS, "num_img_tokens": base * base})]
        transforms = []
        for name, kind, attrs in steps:
            operation = {"name": name, "type": kind}
            if attrs:
                operation["attrs"] = attrs
            transforms.append({"operation": operation})
        return {PROCESSOR_FILE: {"processor": {"name": "image_processing",
                                               "transforms": transforms}}}


def _unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    vision = vision_settings(config.options)
    tower = r"model\.vision_embed_tokens\.img_processor\.vision_model\."
    ignored = [
        IgnoredTensors(tower + r"post_layernorm\..*",
                       "image features are a hidden state before post_layernorm"),
        IgnoredTensors(tower + r"embeddings\.position_ids",
                       "a buffer of positions 0..patches, which the graph adds in order"),
        IgnoredTensors(r"model\.vision_embed_tokens\.wte\.weight",
                       "the image embedding's reference to model.embed_tokens"),
    ]
    return (*ignored, *ignored_layers(tower + r"encoder\.layers\.", vision.feature_state,
                                      vision.clip.num_hidden_layers,
                                      "layers after img_processor layer_idx are not read"))


FAMILY = ModelFamily(
    name="phi3_v",
    model_types=("phi3_v",),
    architectures=("Phi3VForCausalLM",),
    module=Phi3VForCausalLM,
    task=vision_language.TASK,
    tiny_preset="tiny-phi3v",
    normalize_raw=check_raw,
    options=Phi3VOptions,
    ignored_tensors=_unread,
    checkpoint_aliases=(  # the hub's names; the module's own (mobius' tiny checkpoints)
        ("language_model.model.", ("model.", "language_model.model.")),
        ("language_model.lm_head.", ("lm_head.", "language_model.lm_head.")),
        ("vision_embed_tokens.", ("model.vision_embed_tokens.", "vision_embed_tokens.")),
    ),
)

# Phi-3-vision (mobius/models/phi3_v.py): the common decoder as Phi-3 with LongRoPE in 4.x's
# "su" spelling; a 2-layer CLIP tower (hidden 32, 2 heads, MLP 48) on genai's fixed 336 px
# crops of 14 px patches (24 x 24 -> 12 x 12 merged tokens), read at hidden state -2.
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-phi3v": {
        **COMMON, "model_type": "phi3_v", "architectures": ["Phi3VForCausalLM"],
        "pad_token_id": 0, "rms_norm_eps": 1e-5, "max_position_embeddings": 2048,
        "original_max_position_embeddings": 512, "tie_word_embeddings": False,
        "rope_scaling": {"type": "su", "short_factor": [1.0 + 0.1 * i for i in range(8)],
                         "long_factor": [2.0 + 0.5 * i for i in range(8)]},
        "embd_layer": {"embedding_cls": "image", "hd_transform_order": "sub_glb",
                       "projection_cls": "mlp", "use_hd_transform": True,
                       "with_learnable_separator": True},
        "img_processor": {
            "name": "clip_vision_model", "model_name": CLIP_MODEL, "image_dim_out": 32,
            "num_img_tokens": 144, "layer_idx": -2, "type_feature": "patch",
            "clip_config": {"hidden_size": 32, "intermediate_size": 48,
                            "num_hidden_layers": 2, "num_attention_heads": 2},
        },
    },
}
