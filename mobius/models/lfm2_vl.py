"""LFM2-VL (Lfm2VlForConditionalGeneration, model_type "lfm2_vl"): a SigLIP2 NaFlex
tower (mobius/models/siglip2.py), a pixel-unshuffle projector and the LFM2 hybrid
decoder (mobius/models/lfm2.py), as the three models of
mobius/tasks/vision_language.py in the layout onnxruntime-genai's ``lfm2_vl`` type runs:

* ``vision``: pixel_values [images, patches, channels * patch^2],
  pixel_attention_mask [images, patches], spatial_shapes [images, 2] (patch rows,
  columns) -> image_features [tokens, text hidden]. Each image's patch grid is cut into
  downsample_factor^2 blocks; a block's patches (row-major) are concatenated, then
  layer_norm (projector_use_layernorm), linear_1, projector_hidden_act, linear_2; the
  tokens of every image, in order, without padding.
* ``embedding``: LFM2's token embedding with ``image_token_id`` positions replaced by
  the features (mobius/components/image_tokens.py).
* ``model``: the LFM2 decoder fed inputs_embeds; its conv layers carry
  past_key_values.{i}.conv / present.{i}.conv (genai's past_conv_names).

genai 0.18's lfm2_vl processor cuts the image into patches itself and feeds the vision
model under the names genai_config's ``vision.inputs`` gives (pixel_values,
attention_mask, image_sizes), and wraps each image's tokens in <|image_start|> ...
<|image_end|> (so a config.json with ``use_image_special_tokens`` false is refused).
It runs one tile per image: transformers' splitting of large images into tiles plus a
thumbnail (``do_image_splitting``, ``use_thumbnail``) is the processor's, not the
model's, and genai does not do it. transformers 5 reads no ``vision_feature_layer``:
the tower's last layer (after post_layernorm) is used.
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
from mobius.models import lfm2
from mobius.models.family import ModelFamily
from mobius.models.siglip2 import Siglip2VisionTransformer, siglip2_vision_config
from mobius.tasks import genai_image_settings as settings
from mobius.tasks import image_processor, vision_language
from mobius.tasks.task import TensorSpec
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import VOCAB_SIZE

PROCESSOR_FILE = "processor_config.json"
#: Lfm2VlImageProcessor's defaults: mean / std 0.5, 64..256 image tokens per tile
_MEAN_STD, _MIN_TOKENS, _MAX_TOKENS = 0.5, 64, 256


@dataclasses.dataclass(frozen=True)
class Lfm2VlOptions:
    """config.json switches, with transformers' Lfm2VlConfig defaults."""

    image_token_id: int = 396
    projector_hidden_act: str = "gelu"
    projector_hidden_size: int = 2560
    projector_bias: bool = True
    projector_use_layernorm: bool = True
    downsample_factor: int = 2
    vision_config: dict | None = None  # the SigLIP2 tower's section


def normalize_lfm2_vl(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The LFM2 decoder's fields at the top level (mobius/models/lfm2.py), plus the
    LFM2-VL switches and the ``text_config`` / ``vision_config`` sections."""
    text = dict(raw.get("text_config") or {})
    if text.get("model_type", "lfm2") != "lfm2":
        raise UnsupportedModelError(f"lfm2_vl: text_config model_type {text['model_type']!r} "
                                    f"is not supported; supported: lfm2")
    vision = dict(raw.get("vision_config") or {})
    if vision.get("model_type", "siglip2_vision_model") != "siglip2_vision_model":
        raise UnsupportedModelError(f"lfm2_vl: vision tower {vision['model_type']!r} is not "
                                    f"supported; supported: siglip2_vision_model")
    if raw.get("use_image_special_tokens") is False:
        raise UnsupportedModelError("lfm2_vl: use_image_special_tokens false is not supported: "
                                    "onnxruntime-genai's lfm2_vl processor always wraps an "
                                    "image in <|image_start|> ... <|image_end|>")
    o = read_options(Lfm2VlOptions, raw)
    tie = raw.get("tie_embedding", raw.get("tie_word_embeddings"))
    out = {**lfm2.normalize({**text, "model_type": "lfm2"}), **dataclasses.asdict(o),
           "model_type": "lfm2_vl",
           "architectures": list(raw.get("architectures") or ["Lfm2VlForConditionalGeneration"]),
           "tie_word_embeddings": True if tie is None else bool(tie),
           "text_config": text, "vision_config": vision}
    for key in ("dtype", "torch_dtype"):
        if raw.get(key) is not None:
            out[key] = raw[key]
    return out


class Lfm2VlMultiModalProjector(nn.Module):
    """[tokens, vision hidden * factor^2] -> [tokens, text hidden]."""

    def __init__(self, o: Lfm2VlOptions, vision_hidden: int, text_hidden: int):
        super().__init__()
        width = vision_hidden * o.downsample_factor**2
        self.act = o.projector_hidden_act
        self.layer_norm = LayerNorm(width, 1e-5) if o.projector_use_layernorm else None
        self.linear_1 = Linear(width, o.projector_hidden_size, o.projector_bias)
        self.linear_2 = Linear(o.projector_hidden_size, text_hidden, o.projector_bias)

    def forward(self, op, x):
        if self.layer_norm is not None:
            x = self.layer_norm(op, x)
        return self.linear_2(op, apply_activation(op, self.linear_1(op, x), self.act))


def _column(op, spatial_shapes, index: int):
    """spatial_shapes[:, index:index + 1]: [images, 1] int64."""
    return op.Slice(spatial_shapes, op.Constant(value_ints=[index]),
                    op.Constant(value_ints=[index + 1]), op.Constant(value_ints=[1]))


def unshuffle_tokens(op, hidden, spatial_shapes, factor: int):
    """hidden [images, patches, C] -> ([images * T, factor^2 * C] block features, is_token
    [images * T]) with T = patches // factor^2: token k of an image is block (k // per_row,
    k % per_row) of its grid, its factor x factor patches concatenated row-major."""
    one, f = op.Constant(value_int=1), op.Constant(value_int=factor)
    patches = op.Squeeze(op.Shape(hidden, start=1, end=2))
    heights, widths = _column(op, spatial_shapes, 0), _column(op, spatial_shapes, 1)
    per_row = op.Div(widths, f)  # [images, 1]
    counts = op.Mul(op.Div(heights, f), per_row)
    token = op.Range(op.Constant(value_int=0), op.Div(patches, op.Constant(value_int=factor**2)),
                     one)  # [T]
    offsets = op.Range(op.Constant(value_int=0), f, one)  # [factor]
    rows = op.Add(op.Unsqueeze(op.Mul(op.Div(token, per_row), f), op.Constant(value_ints=[2, 3])),
                  op.Unsqueeze(offsets, op.Constant(value_ints=[1])))  # [images, T, f, 1]
    cols = op.Add(op.Unsqueeze(op.Mul(op.Mod(token, per_row), f), op.Constant(value_ints=[2, 3])),
                  offsets)  # [images, T, 1, f]
    images = op.Squeeze(op.Shape(hidden, start=0, end=1))
    first = op.Mul(op.Range(op.Constant(value_int=0), images, one), patches)  # [images]
    index = op.Add(op.Add(op.Unsqueeze(first, op.Constant(value_ints=[1, 2, 3])),
                          op.Mul(rows, op.Unsqueeze(widths, op.Constant(value_ints=[2, 3])))), cols)
    is_token = op.Less(token, counts)  # [images, T]
    index = op.Where(op.Unsqueeze(is_token, op.Constant(value_ints=[2, 3])), index,
                     op.Constant(value_int=0))
    channels = op.Shape(hidden, start=2, end=3)
    flat = op.Reshape(hidden, op.Concat(op.Constant(value_ints=[-1]), channels, axis=0))
    blocks = op.Reshape(op.Gather(flat, index, axis=0),
                        op.Concat(op.Constant(value_ints=[-1]),
                                  op.Mul(channels, op.Constant(value_ints=[factor**2])), axis=0))
    return blocks, op.Reshape(is_token, op.Constant(value_ints=[-1]))


class Lfm2VlForConditionalGeneration(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        o = self.options = config.options
        positive_int("downsample_factor", o.downsample_factor)
        positive_int("projector_hidden_size", o.projector_hidden_size)
        if not 0 <= o.image_token_id < config.vocab_size:
            raise ConfigError(f"lfm2_vl: image_token_id {o.image_token_id} is outside the "
                              f"vocabulary (vocab_size {config.vocab_size})")
        vision, grid = siglip2_vision_config(o.vision_config)
        self.vision, self.hidden_size = vision, config.hidden_size
        self.image_token_id = o.image_token_id
        patch_dim = vision.num_channels * vision.patch_size**2
        self.vision_inputs = (
            TensorSpec("pixel_values", None, (vision_language.NUM_IMAGES,
                                              vision_language.NUM_PATCHES, patch_dim)),
            TensorSpec("pixel_attention_mask", ir.DataType.INT64,
                       (vision_language.NUM_IMAGES, vision_language.NUM_PATCHES)),
            TensorSpec("spatial_shapes", ir.DataType.INT64, (vision_language.NUM_IMAGES, 2)))
        self.vision_tower = Siglip2VisionTransformer(vision, grid)
        self.multi_modal_projector = Lfm2VlMultiModalProjector(o, vision.hidden_size,
                                                               config.hidden_size)
        self.language_model = lfm2.Lfm2ForCausalLM(config)
        if config.tie_word_embeddings:  # the head's own copy (the lookup is in embedding.onnx)
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")

    def encode_images(self, op, pixel_values, pixel_attention_mask, spatial_shapes):
        hidden = self.vision_tower(op, pixel_values, pixel_attention_mask, spatial_shapes)
        blocks, is_token = unshuffle_tokens(op, hidden, spatial_shapes,
                                            self.options.downsample_factor)
        # the rows of real tokens: Gather at NonZero, not Compress (whose ONNX type list has
        # no bfloat16, so a bf16 graph with it fails the checker)
        rows = op.Squeeze(op.NonZero(is_token), op.Constant(value_ints=[0]))
        return self.multi_modal_projector(op, op.Gather(blocks, rows, axis=0))

    def embed(self, op, input_ids, image_features):
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        embeds = self.language_model.model.embed_tokens(op, token_ids)
        return merge_image_features(op, is_image, embeds, image_features, self.hidden_size)

    def genai_model_config(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        factor = self.options.downsample_factor
        return {"vision": {
            "inputs": {"pixel_values": "pixel_values", "attention_mask": "pixel_attention_mask",
                       "image_sizes": "spatial_shapes"},
            "patch_size": self.vision.patch_size, "spatial_merge_size": factor,
            "max_num_patches": self.token_range(preprocessor)[1] * factor**2,
            "config_filename": PROCESSOR_FILE}}

    def token_range(self, preprocessor: Mapping[str, Any]) -> tuple[int, int]:
        """[min_image_tokens, max_image_tokens] of one tile: the checkpoint's
        preprocessor_config.json, else 64..256; settings genai's processor has no
        switch for fail."""
        settings.require(preprocessor, {
            "do_resize": True, "do_rescale": True, "do_normalize": True,
            "encoder_patch_size": self.vision.patch_size,
            "downsample_factor": self.options.downsample_factor,
            "resample": 2}, "lfm2_vl image processor (bilinear)")
        low = settings.number(preprocessor, "min_image_tokens", _MIN_TOKENS, integer=True)
        high = settings.number(preprocessor, "max_image_tokens", _MAX_TOKENS, integer=True)
        if low > high:
            raise ConfigError(f"{image_processor.FILE}: min_image_tokens {low} exceeds "
                              f"max_image_tokens {high}")
        return low, high

    def genai_processor_files(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """genai's image processor (onnxruntime-extensions steps) as Lfm2VlImageProcessor
        resizes one tile: sides a multiple of patch * downsample_factor, within the
        checkpoint's image token bounds (default 64..256), bilinear; its rescale and
        mean / std (default 1/255, 0.5); then channels first and the image size."""
        factor, patch = self.options.downsample_factor, self.vision.patch_size
        area = patch**2 * factor**2
        low, high = self.token_range(preprocessor)
        steps = [
            ("decode_image", "DecodeImage", {"color_space": "RGB"}),
            ("resize", "Resize", {"interpolation": "LINEAR", "width": 512, "height": 512,
                                  "smart_resize": 1, "min_pixels": low * area,
                                  "max_pixels": high * area, "patch_size": patch,
                                  "merge_size": factor}),
            ("rescale", "Rescale", {"rescale_factor": settings.number(
                preprocessor, "rescale_factor", 1 / 255)}),
            ("normalize", "Normalize", {
                "mean": settings.triple(preprocessor, "image_mean", [_MEAN_STD] * 3),
                "std": settings.triple(preprocessor, "image_std", [_MEAN_STD] * 3)}),
            ("to_channel_first", "Permute3D", {"dims": [2, 0, 1]}),
            ("image_sizes", "PixtralImageSizes", None),
        ]
        transforms = [{"operation": {"name": name, "type": kind,
                                     **({"attrs": attrs} if attrs else {})}}
                      for name, kind, attrs in steps]
        return {PROCESSOR_FILE: {"processor": {"name": "lfm2_vl_image_processor",
                                               "transforms": transforms}}}


def _unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    reason = "lfm2_vl reads SigLIP2's last_hidden_state, not its attention-pooling head"
    return (IgnoredTensors(r"(model\.)?vision_tower\.(vision_model\.)?head\..*", reason),)


FAMILY = ModelFamily(
    name="lfm2_vl",
    model_types=("lfm2_vl",),
    architectures=("Lfm2VlForConditionalGeneration",),
    module=Lfm2VlForConditionalGeneration,
    task=vision_language.TASK,
    tiny_preset="tiny-lfm2-vl",
    normalize_raw=normalize_lfm2_vl,
    config_overrides=lfm2.overrides,
    options=Lfm2VlOptions,
    ignored_tensors=_unread,
    checkpoint_aliases=(
        ("vision_tower.", ("model.vision_tower.vision_model.", "model.vision_tower.",
                           "vision_tower.vision_model.", "vision_tower.")),
        ("multi_modal_projector.", ("model.multi_modal_projector.", "multi_modal_projector.")),
        ("language_model.model.", ("model.language_model.", "language_model.model.")),
        # lfm2.py names its attention out_proj and feed-forward weights absolutely
        ("model.layers.", ("model.language_model.layers.", "language_model.model.layers.")),
        ("language_model.lm_head.", ("lm_head.", "language_model.lm_head.")),
    ),
)

# LFM2-VL: the tiny-lfm2 hybrid decoder (conv, attention, conv), a 2-layer SigLIP2 NaFlex
# tower (hidden 32, 2 heads, MLP 40) on 4 px patches with a 4 x 4 position grid, 2 x 2
# pixel unshuffle, layer-normed projector (hidden 48, gelu, biased). The image token is
# the vocabulary's last entry, the image start / end tokens the two before it.
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-lfm2-vl": {
        "model_type": "lfm2_vl", "architectures": ["Lfm2VlForConditionalGeneration"],
        "image_token_id": VOCAB_SIZE - 1, "tie_word_embeddings": True,
        "projector_hidden_size": 48, "projector_hidden_act": "gelu", "projector_bias": True,
        "projector_use_layernorm": True, "downsample_factor": 2,
        "text_config": {k: v for k, v in lfm2.TINY_PRESETS["tiny-lfm2"].items()
                        if k != "architectures"},
        "vision_config": {
            "model_type": "siglip2_vision_model", "hidden_size": 32, "intermediate_size": 40,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_channels": 3, "patch_size": 4,
            "num_patches": 16, "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6,
            "vision_use_head": False,
        },
    },
}
