"""DINOv2 (image-feature-extraction, image-classification).

ViT's embeddings and attention (mobius/models/vit.py) with DINOv2's layer:
x + lambda1 * attn(norm1(x)), x + lambda2 * mlp(norm2(x)) -- per-channel layer
scales ``layer_scale{1,2}.lambda1`` -- a GELU MLP of ``hidden * mlp_ratio``
(``mlp.fc1`` / ``fc2``) and a final ``layernorm``. pooler_output is the normed
class token. Dinov2ForImageClassification classifies concat(class token, mean
of the patch tokens) [batch, 2 * hidden]. The graph takes the configured image
size, for which transformers uses the position table as stored (its bicubic
interpolation only runs for other sizes). The masked-image-modeling
``mask_token`` is not read. SwiGLU MLPs (``use_swiglu_ffn``, the giant model)
are refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.mlp import MLP
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import UnsupportedModelError
from mobius.models.clip import CLIPVisionConfig
from mobius.models.family import ModelFamily
from mobius.models.vision_parts import (POSITION_IDS, VisionOptions, features_outputs,
                                        image_inputs, logits_output, mean_tokens,
                                        normalize_vision, token, vision_config)
from mobius.models.vit import Layers, ViTAttention, ViTEmbeddings
from mobius.tasks import image_classification, image_feature_extraction
from mobius.tasks.image_processor import BICUBIC, IMAGENET_MEAN, IMAGENET_STD, crop_processor
from mobius.tasks.labels import LabelOptions, label_count
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import IMAGE_LABELS, VISION

#: transformers' Dinov2Config defaults (intermediate_size: hidden * mlp_ratio)
DINOV2_DEFAULTS = {
    "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
    "num_channels": 3, "image_size": 224, "patch_size": 14, "hidden_act": "gelu",
    "layer_norm_eps": 1e-6,
}


def _raw(raw: Mapping[str, Any]) -> dict[str, Any]:
    """DINOv2's config with intermediate_size = int(hidden * mlp_ratio); SwiGLU refused."""
    if raw.get("use_swiglu_ffn"):
        raise UnsupportedModelError("dinov2: use_swiglu_ffn (SwiGLU MLP) is not supported")
    hidden = raw.get("hidden_size") or DINOV2_DEFAULTS["hidden_size"]
    return {**raw, "intermediate_size": int(hidden * (raw.get("mlp_ratio") or 4))}


@dataclasses.dataclass(frozen=True)
class Dinov2Options(VisionOptions):
    """intermediate_size is hidden * mlp_ratio here (normalize_raw sets it)."""

    qkv_bias: bool = True


@dataclasses.dataclass(frozen=True)
class Dinov2ClassifierOptions(Dinov2Options, LabelOptions):
    pass


def _normalize(classifier: bool):
    return lambda raw: normalize_vision(DINOV2_DEFAULTS, classifier)(_raw(raw))


class LayerScale(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.lambda1 = Weight([hidden])

    def forward(self, op, x):
        return op.Mul(x, self.lambda1)


class Dinov2Layer(nn.Module):
    def __init__(self, config: CLIPVisionConfig, qkv_bias: bool):
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.norm1 = LayerNorm(hidden, eps)
        self.attention = ViTAttention(config, qkv_bias)
        self.layer_scale1 = LayerScale(hidden)
        self.norm2 = LayerNorm(hidden, eps)
        self.mlp = MLP(hidden, config.intermediate_size, config.hidden_act, bias=True)
        self.layer_scale2 = LayerScale(hidden)

    def forward(self, op, hidden):
        attn = self.layer_scale1(op, self.attention(op, self.norm1(op, hidden)))
        hidden = op.Add(hidden, attn)
        return op.Add(hidden, self.layer_scale2(op, self.mlp(op, self.norm2(op, hidden))))


class Dinov2Model(nn.Module):
    """last_hidden_state (after ``layernorm``), pooler_output (its class token)."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        vision = self.vision = vision_config(config.options, DINOV2_DEFAULTS)
        self.embeddings = ViTEmbeddings(vision)
        qkv_bias = config.options.qkv_bias
        self.encoder = Layers([Dinov2Layer(vision, qkv_bias)
                               for _ in range(vision.num_hidden_layers)])
        self.layernorm = LayerNorm(vision.hidden_size, vision.layer_norm_eps)
        self.inputs = image_inputs(vision)
        self.outputs = features_outputs(vision.num_patches + 1, vision.hidden_size,
                                        vision.hidden_size)

    def image_processor(self) -> dict:
        return crop_processor("BitImageProcessor", self.vision.image_size, IMAGENET_MEAN,
                              IMAGENET_STD, BICUBIC)

    def hidden_states(self, op, pixel_values):
        return self.layernorm(op, self.encoder(op, self.embeddings(op, pixel_values)))

    def forward(self, op, pixel_values):
        hidden = self.hidden_states(op, pixel_values)
        return {"last_hidden_state": hidden, "pooler_output": token(op, hidden)}


class Dinov2ForImageClassification(nn.Module):
    """``dinov2.*`` + ``classifier`` on concat(class token, mean patch token)."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.dinov2 = Dinov2Model(config)
        labels = label_count(config.options)
        self.classifier = Linear(2 * self.dinov2.vision.hidden_size, labels, True)
        self.inputs, self.outputs = self.dinov2.inputs, logits_output(labels)

    def image_processor(self) -> dict:
        return self.dinov2.image_processor()

    def forward(self, op, pixel_values):
        hidden = self.dinov2.hidden_states(op, pixel_values)
        features = op.Concat(token(op, hidden), mean_tokens(op, hidden, start=1), axis=-1)
        return {"logits": self.classifier(op, features)}


def _ignored(prefix: str):
    return lambda config: (POSITION_IDS, IgnoredTensors(
        rf"({prefix})?embeddings\.mask_token", "masked image modeling only"))


FAMILY = ModelFamily(
    name="dinov2", model_types=("dinov2",), architectures=("Dinov2Model",),
    module=Dinov2Model, task=image_feature_extraction.TASK, tiny_preset="tiny-dinov2",
    checkpoint_prefixes=("", "dinov2."),
    normalize_raw=_normalize(False), options=Dinov2Options,
    ignored_tensors=_ignored(r"dinov2\."),
)

CLASSIFIER = ModelFamily(
    name="dinov2-img-cls", model_types=(), architectures=("Dinov2ForImageClassification",),
    module=Dinov2ForImageClassification, task=image_classification.TASK,
    tiny_preset="tiny-dinov2-img-cls",
    normalize_raw=_normalize(True), options=Dinov2ClassifierOptions,
    ignored_tensors=_ignored(r"dinov2\."),
)

#: what the registry reads from this module, in lookup order
FAMILIES = (FAMILY, CLASSIFIER)

_DINOV2 = {**{k: v for k, v in VISION.items() if k != "intermediate_size"},
           "model_type": "dinov2", "mlp_ratio": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-6}
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-dinov2": {**_DINOV2, "architectures": ["Dinov2Model"]},
    "tiny-dinov2-img-cls": {**_DINOV2, "architectures": ["Dinov2ForImageClassification"],
                            **IMAGE_LABELS},
}
