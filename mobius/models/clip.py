"""CLIP vision tower (ViT): the image encoder of LLaVA and other CLIP-based VLMs.

Conv patch embedding + class token + learned positions, ``pre_layrnorm``
(sic, transformers' name), pre-norm encoder layers (x + attn(ln1(x)),
x + mlp(ln2(x))) with bidirectional multi-head attention and a quick-GELU MLP.
Module names mirror transformers' CLIPVisionModel as LLaVA checkpoints on the
hub store it (``vision_model.embeddings.patch_embedding.weight`` ...).

The tower returns the hidden states a VLM selects from, transformers'
``output_hidden_states`` numbering: state 0 is the input of layer 0 (after
``pre_layrnorm``), state i the output of layer i - 1. Only the layers up to the
deepest requested state are built, and ``post_layernorm`` (which only feeds
CLIP's pooled output) never is, so a VLM graph holds no weights it does not use.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.mlp import MLP
from mobius.components.weight import Weight
from mobius.errors import ConfigError

#: transformers' CLIPVisionConfig defaults (a config.json may omit any of them).
CLIP_VISION_DEFAULTS: Mapping[str, Any] = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "num_channels": 3, "image_size": 224, "patch_size": 32,
    "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
}


@dataclasses.dataclass(frozen=True)
class CLIPVisionConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_channels: int
    image_size: int
    patch_size: int
    hidden_act: str
    layer_norm_eps: float

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any],
                  defaults: Mapping[str, Any] = CLIP_VISION_DEFAULTS) -> "CLIPVisionConfig":
        """``defaults``: the family's config class defaults (ViT, DINOv2, SigLIP share the
        fields)."""
        values = {**defaults, **{k: v for k, v in raw.items() if v is not None}}
        config = cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})
        if config.hidden_size % config.num_attention_heads:
            raise ConfigError(f"vision_config: hidden_size ({config.hidden_size}) is not divisible "
                              f"by num_attention_heads ({config.num_attention_heads})")
        if config.image_size % config.patch_size:
            raise ConfigError(f"vision_config: image_size ({config.image_size}) is not a multiple "
                              f"of patch_size ({config.patch_size})")
        return config

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class _Table(nn.Module):
    """A bare weight read whole (position table, conv kernel), named ``<attribute>.weight``."""

    def __init__(self, shape: list[int]):
        super().__init__()
        self.weight = Weight(shape)

    def forward(self, op):
        return self.weight


class CLIPVisionEmbeddings(nn.Module):
    def __init__(self, config: CLIPVisionConfig):
        super().__init__()
        hidden, patch = config.hidden_size, config.patch_size
        self.hidden_size, self.patch_size = hidden, patch
        self.class_embedding = Weight([hidden])
        self.patch_embedding = _Table([hidden, config.num_channels, patch, patch])  # Conv2d, no bias
        self.position_embedding = _Table([config.num_patches + 1, hidden])

    def forward(self, op, pixel_values):
        """[images, channels, H, W] -> [images, 1 + patches, hidden] (class token first)."""
        patches = op.Conv(pixel_values, self.patch_embedding(op),
                          kernel_shape=[self.patch_size] * 2, strides=[self.patch_size] * 2)
        patches = op.Transpose(op.Reshape(patches, op.Constant(value_ints=[0, 0, -1])),
                               perm=[0, 2, 1])  # [images, patches, hidden]
        class_shape = op.Concat(op.Shape(pixel_values, start=0, end=1),
                                op.Constant(value_ints=[1, self.hidden_size]), axis=0)
        class_token = op.Expand(op.Reshape(self.class_embedding,
                                           op.Constant(value_ints=[1, 1, self.hidden_size])),
                                class_shape)
        embeddings = op.Concat(class_token, patches, axis=1)
        return op.Add(embeddings, self.position_embedding(op))  # positions 0..patches, all used


class CLIPAttention(nn.Module):
    """Bidirectional multi-head attention with biased q/k/v/out projections."""

    def __init__(self, config: CLIPVisionConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.q_proj = Linear(hidden, hidden, True)
        self.k_proj = Linear(hidden, hidden, True)
        self.v_proj = Linear(hidden, hidden, True)
        self.out_proj = Linear(hidden, hidden, True)

    def _heads(self, op, x):
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def forward(self, op, hidden, mask=None):
        """``mask``: an additive [batch, 1, seq, seq] mask (CLIP's text tower), or none."""
        q, k, v = (self._heads(op, proj(op, hidden)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        masks = () if mask is None else (mask,)
        attn = op.Attention(q, k, v, *masks, is_causal=0, scale=float(self.head_dim**-0.5))
        attn = op.Transpose(attn, perm=[0, 2, 1, 3])
        attn = op.Reshape(attn, op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        return self.out_proj(op, attn)


class CLIPEncoderLayer(nn.Module):
    def __init__(self, config: CLIPVisionConfig):
        super().__init__()
        hidden, eps = config.hidden_size, config.layer_norm_eps
        self.self_attn = CLIPAttention(config)
        self.layer_norm1 = LayerNorm(hidden, eps)
        self.mlp = MLP(hidden, config.intermediate_size, config.hidden_act, bias=True)
        self.layer_norm2 = LayerNorm(hidden, eps)

    def forward(self, op, hidden, mask=None):
        hidden = op.Add(hidden, self.self_attn(op, self.layer_norm1(op, hidden), mask))
        return op.Add(hidden, self.mlp(op, self.layer_norm2(op, hidden)))


class CLIPEncoder(nn.Module):
    def __init__(self, config: CLIPVisionConfig, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList([CLIPEncoderLayer(config) for _ in range(num_layers)])

    def forward(self, op, hidden):
        states = [hidden]
        for layer in self.layers:
            hidden = layer(op, hidden)
            states.append(hidden)
        return states


class CLIPVisionTransformer(nn.Module):
    def __init__(self, config: CLIPVisionConfig, num_layers: int):
        super().__init__()
        self.embeddings = CLIPVisionEmbeddings(config)
        self.pre_layrnorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.encoder = CLIPEncoder(config, num_layers)

    def forward(self, op, pixel_values):
        return self.encoder(op, self.pre_layrnorm(op, self.embeddings(op, pixel_values)))


class CLIPVisionModel(nn.Module):
    """``vision_model`` (the transformer); returns hidden states 0..``num_layers``.

    ``num_layers``: how many encoder layers to build (default: all); hidden state
    i needs the first i layers.
    """

    def __init__(self, config: CLIPVisionConfig, num_layers: int | None = None):
        super().__init__()
        num_layers = config.num_hidden_layers if num_layers is None else num_layers
        if not 0 <= num_layers <= config.num_hidden_layers:
            raise ConfigError(f"vision tower: cannot build {num_layers} of "
                              f"{config.num_hidden_layers} layers")
        self.config = config
        self.vision_model = CLIPVisionTransformer(config, num_layers)

    def forward(self, op, pixel_values):
        return self.vision_model(op, pixel_values)


def hidden_state_index(layer: int, num_hidden_layers: int) -> int:
    """transformers' ``hidden_states[layer]`` (negative counts from the end) as an index 0..L."""
    count = num_hidden_layers + 1
    if not -count <= layer < count:
        raise ConfigError(f"vision_feature_layer {layer} is out of range for a vision tower "
                          f"with {num_hidden_layers} layers ({count} hidden states)")
    return layer % count
