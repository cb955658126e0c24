"""SigLIP2 NaFlex vision tower (Siglip2VisionModel's ``vision_model`` without its head),
as LFM2-VL reads it: variable-resolution images cut into patches by the processor.

Inputs: pixel_values [images, max_patches, channels * patch^2] (row-major patches,
padded), pixel_attention_mask [images, max_patches] (1 = real patch) and
spatial_shapes [images, 2] (each image's patch rows, columns). The patch embedding
is a Linear; the learned position table is a G x G grid (G^2 = ``num_patches``)
resized per image to its rows x columns with transformers' antialiased bilinear
weights, computed in the graph from spatial_shapes (a [patches, G^2] weight matrix
times the table), padding positions reading the first row. Padded patches are masked
out as attention keys; CLIP's pre-norm layers (mobius/models/clip.py) follow, then
``post_layernorm``.
"""

from __future__ import annotations

from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.attention_mask import padding_mask
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.clip import CLIPEncoderLayer, CLIPVisionConfig, _Table

#: transformers' Siglip2VisionConfig defaults
SIGLIP2_VISION: Mapping[str, Any] = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "num_channels": 3, "patch_size": 16,
    "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "num_patches": 256,
}
F32 = ir.DataType.FLOAT


def siglip2_vision_config(raw: Mapping[str, Any]) -> tuple[CLIPVisionConfig, int]:
    """(the tower's sizes, G: the side of the position grid). ``image_size`` is G patches."""
    values = {**SIGLIP2_VISION, **{k: v for k, v in raw.items() if v is not None}}
    patches = int(values["num_patches"])
    side = round(patches**0.5)
    if patches <= 0 or side * side != patches:
        raise ConfigError(f"vision_config: num_patches ({patches}) must be a positive square "
                          f"(the position embedding grid)")
    if not isinstance(values["patch_size"], int):
        raise ConfigError(f"vision_config: patch_size must be one integer, got "
                          f"{values['patch_size']!r}")
    values["image_size"] = side * int(values["patch_size"])
    return CLIPVisionConfig.from_dict(values), side


def _const(op, value: float):
    return op.Constant(value_float=float(value))


def _axis_weights(op, index, size, grid: int):
    """[images, patches, G]: the weights of F.interpolate(bilinear, antialias) resizing G
    positions to ``size`` along one axis, at output ``index`` [images, patches]."""
    scale = op.Div(_const(op, grid), size)  # [images, 1]
    support = op.Max(scale, _const(op, 1.0))
    center = op.Sub(op.Mul(op.Add(index, _const(op, 0.5)), scale), _const(op, 0.5))
    source = op.Range(_const(op, 0.0), _const(op, grid), _const(op, 1.0))  # [G]
    last = op.Constant(value_ints=[-1])
    distance = op.Abs(op.Sub(source, op.Unsqueeze(center, last)))
    weights = op.Relu(op.Sub(_const(op, 1.0), op.Div(distance, op.Unsqueeze(support, last))))
    return op.Div(weights, op.ReduceSum(weights, last, keepdims=1))


class Siglip2VisionEmbeddings(nn.Module):
    def __init__(self, config: CLIPVisionConfig, grid: int):
        super().__init__()
        self.grid = grid
        self.patch_embedding = Linear(config.num_channels * config.patch_size**2,
                                      config.hidden_size, True)
        self.position_embedding = _Table([grid * grid, config.hidden_size])

    def resized_positions(self, op, spatial_shapes, patches):
        """[images, patches, G^2] @ table: each image's table resized to its grid."""
        sizes = op.Cast(spatial_shapes, to=F32)
        rows_n = op.Slice(sizes, op.Constant(value_ints=[0]), op.Constant(value_ints=[1]),
                          op.Constant(value_ints=[1]))  # [images, 1]
        cols_n = op.Slice(sizes, op.Constant(value_ints=[1]), op.Constant(value_ints=[2]),
                          op.Constant(value_ints=[1]))
        position = op.Cast(op.Range(op.Constant(value_int=0), op.Squeeze(patches),
                                    op.Constant(value_int=1)), to=F32)  # [patches]
        rows = op.Floor(op.Div(position, cols_n))  # [images, patches]
        valid = op.Cast(op.Less(position, op.Mul(rows_n, cols_n)), to=F32)
        cols = op.Mul(op.Sub(position, op.Mul(rows, cols_n)), valid)
        rows = op.Mul(rows, valid)
        row_w = _axis_weights(op, rows, rows_n, self.grid)
        col_w = _axis_weights(op, cols, cols_n, self.grid)
        weights = op.Mul(op.Unsqueeze(row_w, op.Constant(value_ints=[-1])),
                         op.Unsqueeze(col_w, op.Constant(value_ints=[-2])))
        weights = op.Reshape(weights, op.Constant(value_ints=[0, 0, self.grid * self.grid]))
        return op.MatMul(op.Cast(weights, to=get_build_dtype()), self.position_embedding(op))

    def forward(self, op, pixel_values, spatial_shapes):
        patches = op.Shape(pixel_values, start=1, end=2)
        embeds = self.patch_embedding(op, pixel_values)
        return op.Add(embeds, self.resized_positions(op, spatial_shapes, patches))


class Siglip2VisionTransformer(nn.Module):
    """-> last_hidden_state [images, max_patches, hidden] (after post_layernorm)."""

    def __init__(self, config: CLIPVisionConfig, grid: int):
        super().__init__()
        self.embeddings = Siglip2VisionEmbeddings(config, grid)
        self.encoder = _Encoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, pixel_values, pixel_attention_mask, spatial_shapes):
        hidden = self.embeddings(op, pixel_values, spatial_shapes)
        mask = padding_mask(op, pixel_attention_mask, get_build_dtype())  # padded keys masked
        hidden = self.encoder(op, hidden, mask)
        return self.post_layernorm(op, hidden)


class _Encoder(nn.Module):
    """``encoder.layers``: CLIP's layers, every one given the padding mask."""

    def __init__(self, config: CLIPVisionConfig):
        super().__init__()
        self.layers = nn.ModuleList([CLIPEncoderLayer(config)
                                     for _ in range(config.num_hidden_layers)])

    def forward(self, op, hidden, mask):
        for layer in self.layers:
            hidden = layer(op, hidden, mask)
        return hidden
