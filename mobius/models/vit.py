"""ViT (image-feature-extraction, image-classification).

Conv patch embedding with bias, a learned class token first, learned
positions (the table of the configured image size, used as stored), pre-norm
layers (x + attn(layernorm_before(x)), x + mlp(layernorm_after(x))) with biased
q/k/v (``qkv_bias``), GELU MLP, a final ``layernorm``. ViTModel's pooler is
act(dense(class token)) (``pooler_act``, tanh by default; ``pooler_output_size``);
ViTForImageClassification classifies the normed class token. Module names are
the checkpoint's (``encoder.layer.{i}.attention.attention.query``), as
transformers saves them.
"""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.models.bert import bidirectional_attention
from mobius.models.clip import CLIPVisionConfig
from mobius.models.family import ModelFamily
from mobius.models.vision_parts import (POSITION_IDS, PatchConv, VisionOptions,
                                        features_outputs, image_inputs, logits_output,
                                        normalize_vision, token, vision_config, with_class_token)
from mobius.tasks import image_classification, image_feature_extraction
from mobius.tasks.image_processor import BILINEAR, HALF, resize_processor
from mobius.tasks.labels import LabelOptions, label_count
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import IMAGE_LABELS, VISION

#: transformers' ViTConfig defaults
VIT_DEFAULTS = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 16,
    "hidden_act": "gelu", "layer_norm_eps": 1e-12,
}


@dataclasses.dataclass(frozen=True)
class ViTOptions(VisionOptions):
    qkv_bias: bool = True
    pooler_act: str = "tanh"
    pooler_output_size: int | None = None  #: None: hidden_size


@dataclasses.dataclass(frozen=True)
class ViTClassifierOptions(ViTOptions, LabelOptions):
    pass


class PatchEmbeddings(nn.Module):
    """``patch_embeddings.projection`` (a biased Conv2d)."""

    def __init__(self, config: CLIPVisionConfig):
        super().__init__()
        self.projection = PatchConv(config, bias=True)

    def forward(self, op, pixels):
        return self.projection(op, pixels)


class ViTEmbeddings(nn.Module):
    """Class token + patches, + positions [1, 1 + patches, hidden]."""

    def __init__(self, config: CLIPVisionConfig):
        super().__init__()
        self.hidden_size, self.num_patches = config.hidden_size, config.num_patches
        self.cls_token = Weight([1, 1, config.hidden_size])
        self.position_embeddings = Weight([1, config.num_patches + 1, config.hidden_size])
        self.patch_embeddings = PatchEmbeddings(config)

    def forward(self, op, pixels):
        return with_class_token(op, self.patch_embeddings(op, pixels), self.cls_token,
                                self.position_embeddings, self.hidden_size, self.num_patches)


class ViTSelfAttention(nn.Module):
    def __init__(self, config: CLIPVisionConfig, bias: bool):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.query = Linear(hidden, hidden, bias)
        self.key = Linear(hidden, hidden, bias)
        self.value = Linear(hidden, hidden, bias)

    def forward(self, op, hidden):
        return bidirectional_attention(op, (self.query, self.key, self.value), hidden, None,
                                       self.num_heads, self.head_dim)


class Dense(nn.Module):
    """A module holding one biased ``dense`` Linear (ViT's ``*.output``, ``intermediate``)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.dense = Linear(in_features, out_features, True)

    def forward(self, op, x):
        return self.dense(op, x)


class ViTAttention(nn.Module):
    """``attention.attention`` (q/k/v) + ``attention.output.dense``."""

    def __init__(self, config: CLIPVisionConfig, qkv_bias: bool):
        super().__init__()
        self.attention = ViTSelfAttention(config, qkv_bias)
        self.output = Dense(config.hidden_size, config.hidden_size)

    def forward(self, op, hidden):
        return self.output(op, self.attention(op, hidden))


class ViTLayer(nn.Module):
    def __init__(self, config: CLIPVisionConfig, qkv_bias: bool):
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.activation = config.hidden_act
        self.layernorm_before = LayerNorm(hidden, eps)
        self.attention = ViTAttention(config, qkv_bias)
        self.layernorm_after = LayerNorm(hidden, eps)
        self.intermediate = Dense(hidden, config.intermediate_size)
        self.output = Dense(config.intermediate_size, hidden)

    def forward(self, op, hidden):
        hidden = op.Add(hidden, self.attention(op, self.layernorm_before(op, hidden)))
        inner = apply_activation(op, self.intermediate(op, self.layernorm_after(op, hidden)),
                                 self.activation)
        return op.Add(hidden, self.output(op, inner))


class Layers(nn.Module):
    """``encoder.layer.{i}``, applied in order."""

    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layer = nn.ModuleList(layers)

    def forward(self, op, hidden):
        for layer in self.layer:
            hidden = layer(op, hidden)
        return hidden


class ViTPooler(nn.Module):
    def __init__(self, config: ArchitectureConfig, hidden: int):
        super().__init__()
        self.activation = config.options.pooler_act
        self.size = config.options.pooler_output_size or hidden
        self.dense = Linear(hidden, self.size, True)

    def forward(self, op, hidden):
        pooled = self.dense(op, token(op, hidden))
        return op.Tanh(pooled) if self.activation == "tanh" else apply_activation(
            op, pooled, self.activation)


class ViTModel(nn.Module):
    """The image module protocol (mobius/tasks/image.py): last_hidden_state (after
    ``layernorm``) and, with ``pooler``, pooler_output."""

    def __init__(self, config: ArchitectureConfig, pooler: bool = True):
        super().__init__()
        vision = self.vision = vision_config(config.options, VIT_DEFAULTS)
        self.embeddings = ViTEmbeddings(vision)
        qkv_bias = config.options.qkv_bias
        self.encoder = Layers([ViTLayer(vision, qkv_bias) for _ in range(vision.num_hidden_layers)])
        self.layernorm = LayerNorm(vision.hidden_size, vision.layer_norm_eps)
        self.pooler = ViTPooler(config, vision.hidden_size) if pooler else None
        self.inputs = image_inputs(vision)
        self.outputs = features_outputs(vision.num_patches + 1, vision.hidden_size,
                                        self.pooler.size if pooler else None)

    def image_processor(self) -> dict:
        return resize_processor("ViTImageProcessor", self.vision.image_size, HALF, HALF, BILINEAR)

    def hidden_states(self, op, pixel_values):
        return self.layernorm(op, self.encoder(op, self.embeddings(op, pixel_values)))

    def forward(self, op, pixel_values):
        hidden = self.hidden_states(op, pixel_values)
        out = {"last_hidden_state": hidden}
        if self.pooler is not None:
            out["pooler_output"] = self.pooler(op, hidden)
        return out


class ViTForImageClassification(nn.Module):
    """``vit.*`` (no pooler) + ``classifier`` on the normed class token."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.vit = ViTModel(config, pooler=False)
        labels = label_count(config.options)
        self.classifier = Linear(self.vit.vision.hidden_size, labels, True)
        self.inputs, self.outputs = self.vit.inputs, logits_output(labels)

    def image_processor(self) -> dict:
        return self.vit.image_processor()

    def forward(self, op, pixel_values):
        hidden = self.vit.hidden_states(op, pixel_values)
        return {"logits": self.classifier(op, token(op, hidden))}


FAMILY = ModelFamily(
    name="vit", model_types=("vit",), architectures=("ViTModel",),
    module=ViTModel, task=image_feature_extraction.TASK, tiny_preset="tiny-vit",
    checkpoint_prefixes=("", "vit."),
    normalize_raw=normalize_vision(VIT_DEFAULTS), options=ViTOptions,
    ignored_tensors=lambda config: (POSITION_IDS,),
)

CLASSIFIER = ModelFamily(
    name="vit-img-cls", model_types=(), architectures=("ViTForImageClassification",),
    module=ViTForImageClassification, task=image_classification.TASK,
    tiny_preset="tiny-vit-img-cls",
    normalize_raw=normalize_vision(VIT_DEFAULTS, classifier=True), options=ViTClassifierOptions,
    ignored_tensors=lambda config: (POSITION_IDS, IgnoredTensors(
        r"vit\.pooler\..*", "the classifier reads the normed class token")),
)

#: what the registry reads from this module, in lookup order
FAMILIES = (FAMILY, CLASSIFIER)

_VIT = {**VISION, "model_type": "vit", "hidden_act": "gelu", "layer_norm_eps": 1e-12,
        "qkv_bias": True}
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-vit": {**_VIT, "architectures": ["ViTModel"]},
    "tiny-vit-img-cls": {**_VIT, "architectures": ["ViTForImageClassification"], **IMAGE_LABELS},
}
