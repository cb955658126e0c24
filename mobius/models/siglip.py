"""SigLIP (image-feature-extraction, image-classification, zero-shot-image-classification).

Vision tower: biased conv patches + learned positions (no class token), CLIP's
pre-norm layers (mobius/models/clip.py) with tanh-GELU MLPs, ``post_layernorm``.
pooler_output is the multihead attention-pooling head (MAP, ``head.*``): a
learned ``probe`` query attends over the tokens (torch's MultiheadAttention:
packed ``in_proj_weight``/``in_proj_bias``, ``out_proj``), then probe + mlp(
layernorm(probe)). SiglipForImageClassification classifies the mean of all
last_hidden_state tokens (the head is not used). SiglipModel (zero-shot, one
graph): the text tower (bidirectional, no mask: SigLIP's processor pads to
max_length and transformers passes none), pooled at the last token through
``text_model.head``; logits_per_image = exp(logit_scale) * image @ text^T +
logit_bias over L2-normalized embeddings.
"""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.mlp import MLP
from mobius.components.weight import Weight, transpose
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.clip import CLIPEncoder, _Table
from mobius.models.clip_models import (TextTowerConfig, TextTransformer, normalize_zero_shot,
                                       similarity_outputs, zero_shot_specs)
from mobius.models.family import ModelFamily
from mobius.models.vision_parts import (POSITION_IDS, PatchConv, VisionOptions,
                                        features_outputs, image_inputs, logits_output,
                                        mean_tokens, normalize_vision, token, vision_config)
from mobius.tasks import (image_classification, image_feature_extraction,
                          zero_shot_image_classification)
from mobius.tasks.image_processor import BICUBIC, HALF, resize_processor
from mobius.tasks.labels import LabelOptions, label_count
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import IMAGE_LABELS, TEXT, VISION

SIGLIP_VISION = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16,
    "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6,
}
SIGLIP_TEXT = {
    "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "max_position_embeddings": 64, "hidden_act": "gelu_pytorch_tanh",
    "layer_norm_eps": 1e-6, "eos_token_id": None, "projection_size": None,
}


@dataclasses.dataclass(frozen=True)
class SiglipOptions(VisionOptions):
    vision_use_head: bool = True  #: a vision-only config's; a two-tower one's is in vision_config
    text_config: dict | None = None


@dataclasses.dataclass(frozen=True)
class SiglipClassifierOptions(VisionOptions, LabelOptions):
    pass


class SiglipVisionEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.patch_embedding = PatchConv(config, bias=True)
        self.position_embedding = _Table([config.num_patches, config.hidden_size])

    def forward(self, op, pixels):
        return op.Add(self.patch_embedding(op, pixels), self.position_embedding(op))


class MultiheadAttention(nn.Module):
    """torch.nn.MultiheadAttention (batch_first): packed q/k/v rows in ``in_proj_*``."""

    def __init__(self, config):
        super().__init__()
        hidden = self.hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.in_proj_weight = Weight([hidden, 3 * hidden], checkpoint_shape=[3 * hidden, hidden],
                                     transform=transpose)
        self.in_proj_bias = Weight([3 * hidden])
        self.out_proj = Linear(hidden, hidden, True)

    def _project(self, op, x, part: int):
        start, stop = op.Constant(value_ints=[part * self.hidden]), op.Constant(
            value_ints=[(part + 1) * self.hidden])
        weight = op.Slice(self.in_proj_weight, start, stop, op.Constant(value_ints=[1]))
        bias = op.Slice(self.in_proj_bias, start, stop)
        x = op.Add(op.MatMul(x, weight), bias)
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def forward(self, op, query, hidden):
        q, k, v = (self._project(op, x, i) for i, x in enumerate((query, hidden, hidden)))
        attn = op.Attention(q, k, v, is_causal=0, scale=float(self.head_dim**-0.5))
        attn = op.Transpose(attn, perm=[0, 2, 1, 3])
        return self.out_proj(op, op.Reshape(attn, op.Constant(value_ints=[0, 0, self.hidden])))


class SiglipMultiheadAttentionPoolingHead(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden = self.hidden = config.hidden_size
        self.probe = Weight([1, 1, hidden])
        self.attention = MultiheadAttention(config)
        self.layernorm = LayerNorm(hidden, config.layer_norm_eps)
        self.mlp = MLP(hidden, config.intermediate_size, config.hidden_act, bias=True)

    def forward(self, op, hidden):
        shape = op.Concat(op.Shape(hidden, start=0, end=1),
                          op.Constant(value_ints=[1, self.hidden]), axis=0)
        pooled = self.attention(op, op.Expand(self.probe, shape), hidden)
        pooled = op.Add(pooled, self.mlp(op, self.layernorm(op, pooled)))
        return token(op, pooled)


class SiglipVisionTransformer(nn.Module):
    """``vision_model``: (last_hidden_state after post_layernorm, pooled by the head or None)."""

    def __init__(self, config, head: bool):
        super().__init__()
        self.embeddings = SiglipVisionEmbeddings(config)
        self.encoder = CLIPEncoder(config, config.num_hidden_layers)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.head = SiglipMultiheadAttentionPoolingHead(config) if head else None

    def forward(self, op, pixel_values):
        hidden = self.encoder(op, self.embeddings(op, pixel_values))[-1]
        hidden = self.post_layernorm(op, hidden)
        return hidden, None if self.head is None else self.head(op, hidden)


def _uses_head(options: SiglipOptions) -> bool:
    if options.vision_config:
        return options.vision_config.get("vision_use_head", True) is not False
    return options.vision_use_head


def _processor(vision) -> dict:
    return resize_processor("SiglipImageProcessor", vision.image_size, HALF, HALF, BICUBIC)


class SiglipVisionModel(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.vision = vision_config(config.options, SIGLIP_VISION)
        head = _uses_head(config.options)
        self.vision_model = SiglipVisionTransformer(self.vision, head)
        hidden = self.vision.hidden_size
        self.inputs = image_inputs(self.vision)
        self.outputs = features_outputs(self.vision.num_patches, hidden, hidden if head else None)

    def image_processor(self) -> dict:
        return _processor(self.vision)

    def forward(self, op, pixel_values):
        hidden, pooled = self.vision_model(op, pixel_values)
        out = {"last_hidden_state": hidden}
        if pooled is not None:
            out["pooler_output"] = pooled
        return out


class SiglipForImageClassification(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.vision = vision_config(config.options, SIGLIP_VISION)
        self.vision_model = SiglipVisionTransformer(self.vision, head=False)
        labels = label_count(config.options)
        self.classifier = Linear(self.vision.hidden_size, labels, True)
        self.inputs, self.outputs = image_inputs(self.vision), logits_output(labels)

    def image_processor(self) -> dict:
        return _processor(self.vision)

    def forward(self, op, pixel_values):
        hidden, _ = self.vision_model(op, pixel_values)
        return {"logits": self.classifier(op, mean_tokens(op, hidden))}


class SiglipTextTransformer(TextTransformer):
    def __init__(self, config: TextTowerConfig):
        super().__init__(config)
        self.head = Linear(config.hidden_size, config.projection_size or config.hidden_size, True)


class SiglipModel(nn.Module):
    """Both towers in one graph (zero-shot-image-classification)."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.vision = vision_config(config.options, SIGLIP_VISION)
        self.text = TextTowerConfig.from_dict(config.options.text_config, SIGLIP_TEXT)
        self.text_model = SiglipTextTransformer(self.text)
        self.vision_model = SiglipVisionTransformer(self.vision, head=True)
        self.logit_scale = Weight([1])
        self.logit_bias = Weight([1])
        projection = self.text.projection_size or self.text.hidden_size
        if projection != self.vision.hidden_size:
            raise ConfigError(f"siglip: the text head's size ({projection}) must equal the "
                              f"vision hidden size ({self.vision.hidden_size})")
        self.inputs, self.outputs = zero_shot_specs(("input_ids",), self.vision, projection)

    def image_processor(self) -> dict:
        return _processor(self.vision)

    def forward(self, op, input_ids, pixel_values):
        hidden = self.text_model(op, input_ids)
        text = self.text_model.head(op, token(op, hidden, -1))
        _, image = self.vision_model(op, pixel_values)
        return similarity_outputs(op, text, image, self.logit_scale, self.logit_bias)


_VISION_ALIAS = (("vision_model.", ("vision_model.", "")),)

VISION_FAMILY = ModelFamily(
    name="siglip-vision", model_types=("siglip_vision_model",),
    architectures=("SiglipVisionModel",), module=SiglipVisionModel,
    task=image_feature_extraction.TASK, tiny_preset="tiny-siglip-vision",
    normalize_raw=normalize_vision(SIGLIP_VISION), options=SiglipOptions,
    checkpoint_aliases=_VISION_ALIAS,
    ignored_tensors=lambda config: (POSITION_IDS,),
    extra_attention_blocks=1,  # the MAP head (the tiny preset keeps vision_use_head)
)

CLASSIFIER = ModelFamily(
    name="siglip-img-cls", model_types=(), architectures=("SiglipForImageClassification",),
    module=SiglipForImageClassification, task=image_classification.TASK,
    tiny_preset="tiny-siglip-img-cls",
    normalize_raw=normalize_vision(SIGLIP_VISION, classifier=True),
    options=SiglipClassifierOptions,
    unread_config=("text_config",),
    ignored_tensors=lambda config: (POSITION_IDS, IgnoredTensors(
        r"vision_model\.head\..*", "the classifier reads the mean token, not the MAP head")),
)

ZERO_SHOT = ModelFamily(
    name="siglip", model_types=("siglip",), architectures=("SiglipModel",),
    module=SiglipModel, task=zero_shot_image_classification.TASK, tiny_preset="tiny-siglip",
    normalize_raw=normalize_zero_shot(SIGLIP_VISION, SIGLIP_TEXT), options=SiglipOptions,
    ignored_tensors=lambda config: (POSITION_IDS,),
    extra_attention_blocks=1,  # the vision tower's MAP head
)

#: what the registry reads from this module, in lookup order
FAMILIES = (VISION_FAMILY, CLASSIFIER, ZERO_SHOT)

_SIGLIP_TEXT = {**TEXT, "model_type": "siglip_text_model", "hidden_act": "gelu_pytorch_tanh",
                "layer_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
                "projection_size": 48}  # = vision hidden (SigLIP)
_SIGLIP_VISION = {**VISION, "model_type": "siglip_vision_model",
                  "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-siglip-vision": {**_SIGLIP_VISION, "architectures": ["SiglipVisionModel"]},
    "tiny-siglip-img-cls": {"model_type": "siglip",
                            "architectures": ["SiglipForImageClassification"],
                            "text_config": _SIGLIP_TEXT, "vision_config": _SIGLIP_VISION,
                            **IMAGE_LABELS},
    "tiny-siglip": {"model_type": "siglip", "architectures": ["SiglipModel"],
                    "text_config": _SIGLIP_TEXT, "vision_config": _SIGLIP_VISION},
}
