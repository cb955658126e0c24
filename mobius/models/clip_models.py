"""CLIP beyond LLaVA's tower (mobius/models/clip.py): image-feature-extraction,
image-classification and zero-shot-image-classification.

* ``CLIPVisionModel``: last_hidden_state is the encoder output (pre-norm layers,
  ``pre_layrnorm`` first, no final norm), pooler_output = post_layernorm(class
  token). Quick-GELU MLPs.
* ``CLIPForImageClassification``: ``classifier`` on the mean of the patch tokens
  of last_hidden_state (the class token and post_layernorm are not used).
* ``CLIPModel`` (zero-shot, one graph: mobius/tasks/zero_shot_image_classification.py
  says why): the text tower -- token + learned positions, the same pre-norm
  layers under a causal + padding mask, ``final_layer_norm``, pooled at the
  first ``eos_token_id`` (the largest id when eos_token_id is 2, as transformers
  keeps for old configs) -- and both towers' projections (no bias), L2-normalized;
  logits_per_image = exp(logit_scale) * image_embeds @ text_embeds^T.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.attention_mask import causal_padding_mask
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.clip import CLIPEncoder, CLIPVisionTransformer, _Table
from mobius.models.family import ModelFamily
from mobius.models.vision_parts import (POSITION_IDS, PatchConv, VisionOptions, features_outputs,
                                        image_inputs, logits_output, mean_tokens,
                                        normalize_vision, token, vision_config, with_class_token)
from mobius.tasks import (image_classification, image_feature_extraction,
                          zero_shot_image_classification)
from mobius.tasks.image import BATCH, SEQ, TEXT_BATCH
from mobius.tasks.image_processor import BICUBIC, crop_processor
from mobius.tasks.labels import LabelOptions, label_count
from mobius.tasks.task import TensorSpec
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import IMAGE_LABELS, TEXT, VISION

CLIP_VISION = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 32,
    "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
}
CLIP_TEXT = {
    "vocab_size": 49408, "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12,
    "num_attention_heads": 8, "max_position_embeddings": 77, "hidden_act": "quick_gelu",
    "layer_norm_eps": 1e-5, "eos_token_id": 49407, "projection_size": None,
}
CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


@dataclasses.dataclass(frozen=True)
class CLIPOptions(VisionOptions):
    text_config: dict | None = None
    projection_dim: int = 512


@dataclasses.dataclass(frozen=True)
class CLIPClassifierOptions(VisionOptions, LabelOptions):
    pass


@dataclasses.dataclass(frozen=True)
class TextTowerConfig:
    """A CLIP / SigLIP text tower's config (``text_config``)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int
    hidden_act: str
    layer_norm_eps: float
    eos_token_id: int | None
    projection_size: int | None  #: SigLIP's text head size (None: hidden_size)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> "TextTowerConfig":
        values = {**defaults, **{k: v for k, v in (raw or {}).items() if v is not None}}
        config = cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})
        if config.hidden_size % config.num_attention_heads:
            raise ConfigError(f"text_config: hidden_size ({config.hidden_size}) is not divisible "
                              f"by num_attention_heads ({config.num_attention_heads})")
        return config

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


class TextEmbeddings(nn.Module):
    """token_embedding + position_embedding (positions 0..seq-1)."""

    def __init__(self, config: TextTowerConfig):
        super().__init__()
        self.token_embedding = Embedding(config.vocab_size, config.hidden_size)
        self.position_embedding = Embedding(config.max_position_embeddings, config.hidden_size)

    def forward(self, op, input_ids):
        # 0..S-1 as a running count over input_ids ([batch, seq]: shape inference keeps
        # the named dims the Skip*Norm fusions check)
        ones = op.Add(op.Mul(input_ids, op.Constant(value_int=0)), op.Constant(value_int=1))
        positions = op.Sub(op.CumSum(ones, op.Constant(value_int=1)), op.Constant(value_int=1))
        return op.Add(self.token_embedding(op, input_ids), self.position_embedding(op, positions))


class TextTransformer(nn.Module):
    """``text_model``: embeddings, ``encoder.layers``, ``final_layer_norm``; returns the
    normed hidden states [batch, seq, hidden]."""

    def __init__(self, config: TextTowerConfig):
        super().__init__()
        self.embeddings = TextEmbeddings(config)
        self.encoder = CLIPEncoder(config, config.num_hidden_layers)
        self.final_layer_norm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, input_ids, mask=None):
        hidden = self.embeddings(op, input_ids)
        for layer in self.encoder.layers:
            hidden = layer(op, hidden, mask)
        return self.final_layer_norm(op, hidden)


def l2_normalize(op, x):
    norm = op.Sqrt(op.ReduceSum(op.Mul(x, x), op.Constant(value_ints=[-1]), keepdims=1))
    return op.Div(x, norm)


def similarity_outputs(op, text, image, scale, bias=None):
    """{logits_per_image, text_embeds, image_embeds} from unnormalized embeddings."""
    text, image = l2_normalize(op, text), l2_normalize(op, image)
    logits = op.Mul(op.MatMul(image, op.Transpose(text, perm=[1, 0])), op.Exp(scale))
    if bias is not None:
        logits = op.Add(logits, bias)
    return {"logits_per_image": logits, "text_embeds": text, "image_embeds": image}


def zero_shot_specs(text_inputs: tuple[str, ...], vision, projection: int):
    inputs = tuple(TensorSpec(n, ir.DataType.INT64, (TEXT_BATCH, SEQ)) for n in text_inputs)
    outputs = (TensorSpec("logits_per_image", None, (BATCH, TEXT_BATCH)),
               TensorSpec("text_embeds", None, (TEXT_BATCH, projection)),
               TensorSpec("image_embeds", None, (BATCH, projection)))
    return inputs + image_inputs(vision), outputs


class CLIPClassTokenEmbeddings(nn.Module):
    """CLIP's embeddings (same tensors as mobius/models/clip.py's) with the class token
    added as with_class_token does: every dim inferable, so the first norm fuses."""

    def __init__(self, config):
        super().__init__()
        hidden = self.hidden_size = config.hidden_size
        self.num_patches = config.num_patches
        self.class_embedding = Weight([hidden])
        self.patch_embedding = PatchConv(config, bias=False)
        self.position_embedding = _Table([config.num_patches + 1, hidden])

    def forward(self, op, pixel_values):
        return with_class_token(op, self.patch_embedding(op, pixel_values), self.class_embedding,
                                self.position_embedding(op), self.hidden_size, self.num_patches)


class CLIPVisionTower(CLIPVisionTransformer):
    """``vision_model`` with ``post_layernorm``: (last_hidden_state, pooled)."""

    def __init__(self, config, post_layernorm: bool = True):
        super().__init__(config, config.num_hidden_layers)
        self.embeddings = CLIPClassTokenEmbeddings(config)
        self.post_layernorm = (LayerNorm(config.hidden_size, config.layer_norm_eps)
                               if post_layernorm else None)

    def forward(self, op, pixel_values):
        hidden = super().forward(op, pixel_values)[-1]
        pooled = None if self.post_layernorm is None else self.post_layernorm(op, token(op, hidden))
        return hidden, pooled


def _processor(vision) -> dict:
    return crop_processor("CLIPImageProcessor", vision.image_size, CLIP_MEAN, CLIP_STD, BICUBIC)


class CLIPVisionModel(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.vision = vision_config(config.options, CLIP_VISION)
        self.vision_model = CLIPVisionTower(self.vision)
        self.inputs = image_inputs(self.vision)
        hidden = self.vision.hidden_size
        self.outputs = features_outputs(self.vision.num_patches + 1, hidden, hidden)

    def image_processor(self) -> dict:
        return _processor(self.vision)

    def forward(self, op, pixel_values):
        hidden, pooled = self.vision_model(op, pixel_values)
        return {"last_hidden_state": hidden, "pooler_output": pooled}


class CLIPForImageClassification(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.vision = vision_config(config.options, CLIP_VISION)
        self.vision_model = CLIPVisionTower(self.vision, post_layernorm=False)
        labels = label_count(config.options)
        self.classifier = Linear(self.vision.hidden_size, labels, True)
        self.inputs, self.outputs = image_inputs(self.vision), logits_output(labels)

    def image_processor(self) -> dict:
        return _processor(self.vision)

    def forward(self, op, pixel_values):
        hidden, _ = self.vision_model(op, pixel_values)
        return {"logits": self.classifier(op, mean_tokens(op, hidden, start=1))}


def eos_positions(op, input_ids, eos_token_id: int | None):
    """Per row, the index of the first eos_token_id (the largest id when it is 2)."""
    if eos_token_id is None or eos_token_id == 2:
        return op.ArgMax(input_ids, axis=-1, keepdims=1)
    is_eos = op.Cast(op.Equal(input_ids, op.Constant(value_int=eos_token_id)),
                     to=ir.DataType.INT32)
    return op.ArgMax(is_eos, axis=-1, keepdims=1)


class CLIPModel(nn.Module):
    """Both towers in one graph (zero-shot-image-classification)."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.vision = vision_config(config.options, CLIP_VISION)
        self.text = TextTowerConfig.from_dict(config.options.text_config, CLIP_TEXT)
        projection = config.options.projection_dim
        self.text_model = TextTransformer(self.text)
        self.vision_model = CLIPVisionTower(self.vision)
        self.visual_projection = Linear(self.vision.hidden_size, projection)
        self.text_projection = Linear(self.text.hidden_size, projection)
        self.logit_scale = Weight([])
        self.inputs, self.outputs = zero_shot_specs(("input_ids", "attention_mask"), self.vision,
                                                    projection)

    def image_processor(self) -> dict:
        return _processor(self.vision)

    def forward(self, op, input_ids, attention_mask, pixel_values):
        mask = causal_padding_mask(op, input_ids, attention_mask, get_build_dtype())
        hidden = self.text_model(op, input_ids, mask)
        pooled = op.GatherND(hidden, eos_positions(op, input_ids, self.text.eos_token_id),
                             batch_dims=1)
        _, image = self.vision_model(op, pixel_values)
        return similarity_outputs(op, self.text_projection(op, pooled),
                                  self.visual_projection(op, image), self.logit_scale)


def normalize_zero_shot(vision_defaults, text_defaults):
    """The vision tower's sizes as the standard names, the text vocabulary as vocab_size,
    num_hidden_layers counting both towers' layers."""
    def normalize(raw):
        out = normalize_vision(vision_defaults)(raw)
        text = TextTowerConfig.from_dict(raw.get("text_config"), text_defaults)
        out.update(vocab_size=text.vocab_size,
                   num_hidden_layers=out["num_hidden_layers"] + text.num_hidden_layers)
        return out
    return normalize


_VISION_ALIAS = (("vision_model.", ("vision_model.", "")),)

VISION_FAMILY = ModelFamily(
    name="clip-vision", model_types=("clip_vision_model",), architectures=("CLIPVisionModel",),
    cohorts=("every-dtype",),
    module=CLIPVisionModel, task=image_feature_extraction.TASK, tiny_preset="tiny-clip-vision",
    normalize_raw=normalize_vision(CLIP_VISION), options=VisionOptions,
    checkpoint_aliases=_VISION_ALIAS,
    ignored_tensors=lambda config: (POSITION_IDS,),
)

CLASSIFIER = ModelFamily(
    name="clip-img-cls", model_types=(), architectures=("CLIPForImageClassification",),
    cohorts=("every-dtype",),
    module=CLIPForImageClassification, task=image_classification.TASK,
    tiny_preset="tiny-clip-img-cls",
    normalize_raw=normalize_vision(CLIP_VISION, classifier=True), options=CLIPClassifierOptions,
    unread_config=("text_config",),
    ignored_tensors=lambda config: (POSITION_IDS, IgnoredTensors(
        r"vision_model\.post_layernorm\..*", "the classifier reads the unnormed patch tokens")),
)

ZERO_SHOT = ModelFamily(
    name="clip", cohorts=("every-dtype",), model_types=("clip",), architectures=("CLIPModel",),
    module=CLIPModel, task=zero_shot_image_classification.TASK, tiny_preset="tiny-clip",
    normalize_raw=normalize_zero_shot(CLIP_VISION, CLIP_TEXT), options=CLIPOptions,
    ignored_tensors=lambda config: (POSITION_IDS,),
)

#: what the registry reads from this module, in lookup order
FAMILIES = (VISION_FAMILY, CLASSIFIER, ZERO_SHOT)

_CLIP_TEXT = {**TEXT, "model_type": "clip_text_model", "hidden_act": "quick_gelu",
              "layer_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 3, "pad_token_id": 0}
_CLIP_VISION = {**VISION, "model_type": "clip_vision_model", "hidden_act": "quick_gelu",
                "layer_norm_eps": 1e-5}
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-clip-vision": {**_CLIP_VISION, "architectures": ["CLIPVisionModel"]},
    "tiny-clip-img-cls": {"model_type": "clip", "architectures": ["CLIPForImageClassification"],
                          "text_config": _CLIP_TEXT, "vision_config": _CLIP_VISION,
                          "projection_dim": 40, **IMAGE_LABELS},
    "tiny-clip": {"model_type": "clip", "architectures": ["CLIPModel"], "text_config": _CLIP_TEXT,
                  "vision_config": _CLIP_VISION, "projection_dim": 40},
}
