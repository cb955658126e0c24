"""Qwen3-VL's vision tower: Qwen2.5-VL's patch embedding (with a bias), 2-D
rotary and attention (mobius/models/qwen2_5_vl_vision.py), plus learned
position embeddings resampled to each image's grid, LayerNorm blocks with a
plain MLP, full attention within each frame, and the deepstack mergers.

Output: image_features [patches / spatial_merge^2, out_hidden * (1 + D)]: the
merger's features, then the D deepstack features in layer order (layer
``deepstack_visual_indexes[k]`` through deepstack merger k), side by side. genai
hands this one tensor to the embedding model (see mobius/models/qwen3_vl.py).

The learned table is a square grid (``num_position_embeddings`` = side^2);
each patch reads it by bilinear interpolation with aligned corners at
(row * (side - 1) / max(h - 1, 1), col * (side - 1) / max(w - 1, 1)), as
transformers resamples it. Every image of one call shares one grid, as in
Qwen2.5-VL.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.mlp import MLP
from mobius.config.fields import positive_int
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.qwen2_5_vl_vision import (PatchEmbed, QwenVisionAttention, axial_inv_freq,
                                             axial_rotary, group_mask, patch_layout)

#: Qwen3VLVisionConfig's defaults (transformers), for keys config.json leaves out.
VISION_DEFAULTS: Mapping[str, Any] = {
    "depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh",
    "intermediate_size": 4304, "num_heads": 16, "in_channels": 3, "patch_size": 16,
    "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
    "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24],
}
_NORM_EPS = 1e-6  # Qwen3VLVisionBlock / PatchMerger LayerNorm


@dataclasses.dataclass(frozen=True)
class Qwen3VisionConfig:
    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    hidden_act: str
    in_channels: int
    patch_size: int
    spatial_merge_size: int
    temporal_patch_size: int
    out_hidden_size: int
    num_position_embeddings: int
    deepstack_visual_indexes: tuple[int, ...]
    rope_theta: float

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Qwen3VisionConfig":
        raw = {**VISION_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
        ints = {key: positive_int(f"vision_config.{key}", raw[key]) for key in (
            "depth", "hidden_size", "intermediate_size", "num_heads", "in_channels",
            "patch_size", "spatial_merge_size", "temporal_patch_size", "out_hidden_size",
            "num_position_embeddings")}
        rope = raw.get("rope_parameters") or {}
        config = cls(**ints, hidden_act=str(raw["hidden_act"]),
                     deepstack_visual_indexes=tuple(int(i) for i in
                                                    raw["deepstack_visual_indexes"]),
                     rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))))
        config.check()
        return config

    def check(self) -> None:
        if self.hidden_size % self.num_heads or self.head_dim % 4:
            raise ConfigError(f"config.json: vision_config hidden_size {self.hidden_size} / "
                              f"num_heads {self.num_heads} must be a multiple of 4 (2-D RoPE)")
        if self.grid_side ** 2 != self.num_position_embeddings:
            raise ConfigError(f"config.json: vision_config num_position_embeddings "
                              f"{self.num_position_embeddings} is not a square")
        bad = [i for i in self.deepstack_visual_indexes if not 0 <= i < self.depth]
        if bad or len(set(self.deepstack_visual_indexes)) != len(self.deepstack_visual_indexes):
            raise ConfigError(f"config.json: vision_config deepstack_visual_indexes "
                              f"{list(self.deepstack_visual_indexes)} are not distinct layers "
                              f"of a depth-{self.depth} tower")

    @property
    def kv_heads(self) -> int:
        return self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2

    @property
    def grid_side(self) -> int:
        return math.isqrt(self.num_position_embeddings)


class Qwen3VisionBlock(nn.Module):
    def __init__(self, config: Qwen3VisionConfig):
        super().__init__()
        self.norm1 = LayerNorm(config.hidden_size, _NORM_EPS)
        self.attn = QwenVisionAttention(config)
        self.norm2 = LayerNorm(config.hidden_size, _NORM_EPS)
        self.mlp = MLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                       names=("linear_fc1", "linear_fc2"))

    def forward(self, op, x, cos, sin, mask):
        x = op.Add(x, self.attn(op, self.norm1(op, x), cos, sin, mask))
        return op.Add(x, self.mlp(op, self.norm2(op, x)))


class Qwen3PatchMerger(nn.Module):
    """LayerNorm (per token, or with ``postshuffle`` over each spatial_merge^2
    block: the deepstack mergers), then Linear, GELU, Linear per block."""

    def __init__(self, config: Qwen3VisionConfig, postshuffle: bool = False):
        super().__init__()
        self.merged = config.hidden_size * config.spatial_merge_size ** 2
        self.postshuffle = postshuffle
        self.norm = LayerNorm(self.merged if postshuffle else config.hidden_size, _NORM_EPS)
        self.linear_fc1 = Linear(self.merged, self.merged, True)
        self.linear_fc2 = Linear(self.merged, config.out_hidden_size, True)

    def forward(self, op, x):
        shape = op.Constant(value_ints=[-1, self.merged])
        x = self.norm(op, op.Reshape(x, shape)) if self.postshuffle else op.Reshape(
            self.norm(op, x), shape)
        return self.linear_fc2(op, apply_activation(op, self.linear_fc1(op, x), "gelu"))


class Qwen3VisionTransformer(nn.Module):
    """pixel_values [patches, patch_dim], image_grid_thw [images, 3] -> image
    features [patches / spatial_merge^2, out_hidden * (1 + deepstack layers read)]."""

    def __init__(self, config: Qwen3VisionConfig):
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config, bias=True)
        self.pos_embed = Embedding(config.num_position_embeddings, config.hidden_size)
        self.blocks = nn.ModuleList([Qwen3VisionBlock(config) for _ in range(config.depth)])
        self.merger = Qwen3PatchMerger(config)
        self.deepstack_merger_list = nn.ModuleList(
            [Qwen3PatchMerger(config, postshuffle=True) for _ in config.deepstack_visual_indexes])
        self.inv_freq = axial_inv_freq(config.head_dim, config.rope_theta)

    def forward(self, op, pixel_values, image_grid_thw):
        layout = patch_layout(op, pixel_values, image_grid_thw, self.config.spatial_merge_size)
        cos, sin = axial_rotary(op, self.inv_freq, layout["row"], layout["col"])
        mask = group_mask(op, layout["frame"])
        x = op.Add(self.patch_embed(op, pixel_values), self._positions(op, layout))
        indexes = self.config.deepstack_visual_indexes
        features = [self.merger]  # then the deepstack features in layer order
        for i, block in enumerate(self.blocks):
            x = block(op, x, cos, sin, mask)
            if i in indexes:  # the merger of its place in the list
                features.append(self.deepstack_merger_list[indexes.index(i)](op, x))
        features[0] = self.merger(op, x)
        return features[0] if len(features) == 1 else op.Concat(*features, axis=-1)

    def _positions(self, op, layout):
        """[1, patches, hidden]: the learned table, bilinearly resampled to the grid."""
        side = self.config.grid_side
        rows, row_w = _axis_taps(op, layout["row"], layout["h"], side)
        cols, col_w = _axis_taps(op, layout["col"], layout["w"], side)
        total = None
        for a in range(2):
            for b in range(2):
                index = op.Add(op.Mul(rows[a], op.Constant(value_int=side)), cols[b])
                term = op.Mul(self.pos_embed(op, index), op.Mul(row_w[a], col_w[b]))
                total = term if total is None else op.Add(total, term)
        return op.Unsqueeze(total, op.Constant(value_ints=[0]))


def _axis_taps(op, index, size, side: int):
    """Along one axis of ``size`` patches: the two table rows each patch reads
    (int64 [patches], clamped) and their weights (float [patches, 1])."""
    float32 = ir.DataType.FLOAT
    scale = op.Cast(op.Max(op.Sub(size, op.Constant(value_int=1)), op.Constant(value_int=1)),
                    to=float32)
    src = op.Div(op.Mul(op.Cast(index, to=float32),
                        op.Constant(value_float=float(side - 1))), scale)
    floor = op.Floor(src)
    frac = op.Sub(src, floor)
    low = op.Cast(floor, to=ir.DataType.INT64)
    top = op.Constant(value_int=side - 1)
    taps = (op.Min(low, top), op.Min(op.Add(low, op.Constant(value_int=1)), top))
    last = op.Constant(value_ints=[-1])
    one = op.Constant(value_float=1.0)
    weights = (op.Unsqueeze(op.Sub(one, frac), last), op.Unsqueeze(frac, last))
    dtype = get_build_dtype()
    return taps, tuple(op.Cast(w, to=dtype) for w in weights)
