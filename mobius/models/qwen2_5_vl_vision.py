"""Qwen2.5-VL's vision tower: patch embedding, 2-D rotary, window / full
attention blocks and the patch merger, as one graph over flattened patches.

Inputs are what the Qwen2-VL image processor (and onnxruntime-genai's) gives:
``pixel_values`` [patches, channels * temporal_patch * patch * patch], the
patches of every frame in the processor's order (each spatial_merge x
spatial_merge block consecutive), and ``image_grid_thw`` [images, 3] (frames,
rows, columns in patches). Every image of one call must share one grid row:
onnxruntime-genai calls the model once per image unless all images' grids are
equal. Frames are independent: attention never crosses a frame.

transformers permutes the merge blocks into window order, attends within each
window (``cu_window_seqlens``) and permutes back after the merger. Attention
is order-free within a set of tokens, so here tokens stay in processor order
and each layer attends under a mask: same window of the same frame (window
layers), or same frame (``fullatt_block_indexes``). The result is the same.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention import scaled_dot_product_attention
from mobius.components.attention_mask import _most_negative
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.config.fields import positive_int
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.weights.dtypes import numpy_dtype

#: Qwen2_5_VLVisionConfig's defaults (transformers), for keys config.json leaves out.
VISION_DEFAULTS: Mapping[str, Any] = {
    "depth": 32, "hidden_size": 3584, "hidden_act": "silu", "intermediate_size": 3420,
    "num_heads": 16, "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2,
    "temporal_patch_size": 2, "tokens_per_second": 4, "window_size": 112,
    "out_hidden_size": 3584, "fullatt_block_indexes": [7, 15, 23, 31],
}
_NORM_EPS = 1e-6  # Qwen2_5_VLVisionBlock / PatchMerger RMSNorm


@dataclasses.dataclass(frozen=True)
class QwenVisionConfig:
    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    hidden_act: str
    in_channels: int
    patch_size: int
    spatial_merge_size: int
    temporal_patch_size: int
    window_size: int
    tokens_per_second: int
    out_hidden_size: int
    fullatt_block_indexes: tuple[int, ...]
    rope_theta: float

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "QwenVisionConfig":
        """vision_config (transformers 4.x spells in_channels ``in_chans``), checked."""
        given = {k: v for k, v in raw.items() if v is not None}
        if "in_chans" in given:
            given.setdefault("in_channels", given["in_chans"])
        raw = {**VISION_DEFAULTS, **given}
        ints = {key: positive_int(f"vision_config.{key}", raw[key]) for key in (
            "depth", "hidden_size", "intermediate_size", "num_heads", "in_channels",
            "patch_size", "spatial_merge_size", "temporal_patch_size", "window_size",
            "tokens_per_second", "out_hidden_size")}
        rope = raw.get("rope_parameters") or {}
        config = cls(**ints, hidden_act=str(raw["hidden_act"]),
                     fullatt_block_indexes=tuple(int(i) for i in raw["fullatt_block_indexes"]),
                     rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))))
        config.check()
        return config

    def check(self) -> None:
        if self.hidden_size % self.num_heads or self.head_dim % 4:
            raise ConfigError(f"config.json: vision_config hidden_size {self.hidden_size} / "
                              f"num_heads {self.num_heads} must be a multiple of 4 (2-D RoPE)")
        if self.window_size % (self.spatial_merge_size * self.patch_size):
            raise ConfigError(f"config.json: vision_config window_size {self.window_size} is not "
                              f"a multiple of spatial_merge_size * patch_size")
        bad = [i for i in self.fullatt_block_indexes if not 0 <= i < self.depth]
        if bad:
            raise ConfigError(f"config.json: vision_config fullatt_block_indexes {bad} are not "
                              f"layers of a depth-{self.depth} tower")

    @property
    def kv_heads(self) -> int:
        """Key / value heads of the attention (EXAONE 4.5's tower groups them)."""
        return self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2

    @property
    def merger_window(self) -> int:
        """Window side in merged tokens."""
        return self.window_size // self.spatial_merge_size // self.patch_size


class QwenVisionAttention(nn.Module):
    """Qwen2.5-VL's: qkv rows (q|k|v, head, dim); with ``config.kv_heads`` < num_heads
    (EXAONE 4.5's grouped-query tower) q holds num_heads heads, k and v kv_heads each."""

    def __init__(self, config: QwenVisionConfig):
        super().__init__()
        self.num_heads, self.head_dim = config.num_heads, config.head_dim
        self.kv_heads = config.kv_heads
        kv_size = 2 * self.kv_heads * self.head_dim
        self.qkv = Linear(config.hidden_size, config.hidden_size + kv_size, True)
        self.proj = Linear(config.hidden_size, config.hidden_size, True)

    def forward(self, op, x, cos, sin, mask):
        """x [1, patches, hidden]."""
        q, k, v = self._heads(op, self.qkv(op, x))
        q = op.RotaryEmbedding(q, cos, sin)
        k = op.RotaryEmbedding(k, cos, sin)
        attn, _, _ = scaled_dot_product_attention(op, q, k, v, mask, scale=self.head_dim ** -0.5)
        attn = op.Reshape(op.Transpose(attn, perm=[0, 2, 1, 3]),
                          op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        return self.proj(op, attn)

    def _heads(self, op, qkv):
        """q [1, heads, patches, dim]; k, v [1, kv_heads, patches, dim]."""
        if self.kv_heads == self.num_heads:
            qkv = op.Reshape(qkv, op.Constant(value_ints=[0, 0, 3, self.num_heads,
                                                          self.head_dim]))
            qkv = op.Transpose(qkv, perm=[2, 0, 3, 1, 4])  # [3, 1, heads, patches, dim]
            return tuple(op.Squeeze(part, op.Constant(value_ints=[0]))
                         for part in op.Split(qkv, num_outputs=3, axis=0, _outputs=3))
        sizes = [self.num_heads * self.head_dim] + [self.kv_heads * self.head_dim] * 2
        parts = op.Split(qkv, op.Constant(value_ints=sizes), axis=-1, _outputs=3)
        return tuple(op.Transpose(op.Reshape(part, op.Constant(value_ints=[0, 0, -1,
                                                                           self.head_dim])),
                                  perm=[0, 2, 1, 3]) for part in parts)


class QwenVisionBlock(nn.Module):
    def __init__(self, config: QwenVisionConfig):
        super().__init__()
        self.norm1 = RMSNorm(config.hidden_size, _NORM_EPS)
        self.attn = QwenVisionAttention(config)
        self.norm2 = RMSNorm(config.hidden_size, _NORM_EPS)
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act, True)

    def forward(self, op, x, cos, sin, mask):
        x = op.Add(x, self.attn(op, self.norm1(op, x), cos, sin, mask))
        return op.Add(x, self.mlp(op, self.norm2(op, x)))


class PatchProjection(nn.Module):
    """Conv3d(kernel = stride = patch) on one flattened patch is a MatMul
    (+ the conv's bias: Qwen3-VL has one, Qwen2.5-VL not)."""

    def __init__(self, config: QwenVisionConfig, bias: bool = False):
        super().__init__()
        hidden = config.hidden_size
        self.weight = Weight(
            [config.patch_dim, hidden],
            checkpoint_shape=[hidden, config.in_channels, config.temporal_patch_size,
                              config.patch_size, config.patch_size],
            transform=lambda a: np.ascontiguousarray(a.reshape(hidden, -1).T))
        self.bias = Weight([hidden]) if bias else None

    def forward(self, op, pixel_values):
        out = op.MatMul(pixel_values, self.weight)
        return out if self.bias is None else op.Add(out, self.bias)


class PatchEmbed(nn.Module):
    """[patches, patch_dim] -> [1, patches, hidden]."""

    def __init__(self, config: QwenVisionConfig, bias: bool = False):
        super().__init__()
        self.proj = PatchProjection(config, bias)

    def forward(self, op, pixel_values):
        return op.Unsqueeze(self.proj(op, pixel_values), op.Constant(value_ints=[0]))


class PatchMerger(nn.Module):
    """RMSNorm, then each spatial_merge^2 block of tokens -> Linear, GELU, Linear."""

    def __init__(self, config: QwenVisionConfig):
        super().__init__()
        merged = config.hidden_size * config.spatial_merge_size ** 2
        self.merged = merged
        self.ln_q = RMSNorm(config.hidden_size, _NORM_EPS)
        self.mlp = nn.ModuleList([Linear(merged, merged, True), nn.Module(),
                                  Linear(merged, config.out_hidden_size, True)])

    def forward(self, op, x):
        x = op.Reshape(self.ln_q(op, x), op.Constant(value_ints=[-1, self.merged]))
        return self.mlp[2](op, apply_activation(op, self.mlp[0](op, x), "gelu"))


class QwenVisionTransformer(nn.Module):
    """pixel_values [patches, patch_dim], image_grid_thw [images, 3] ->
    image features [patches / spatial_merge^2, out_hidden_size]."""

    def __init__(self, config: QwenVisionConfig):
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config)
        self.blocks = nn.ModuleList([QwenVisionBlock(config) for _ in range(config.depth)])
        self.merger = PatchMerger(config)
        self.inv_freq = axial_inv_freq(config.head_dim, config.rope_theta)

    def forward(self, op, pixel_values, image_grid_thw):
        config = self.config
        layout = patch_layout(op, pixel_values, image_grid_thw, config.spatial_merge_size,
                              config.merger_window)
        cos, sin = axial_rotary(op, self.inv_freq, layout["row"], layout["col"])
        masks = {False: group_mask(op, layout["window"]), True: group_mask(op, layout["frame"])}
        x = self.patch_embed(op, pixel_values)
        for i, block in enumerate(self.blocks):
            x = block(op, x, cos, sin, masks[i in config.fullatt_block_indexes])
        return self.merger(op, x)


def axial_inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """[head_dim / 4] frequencies, shared by the row and the column halves."""
    return 1.0 / (theta ** (np.arange(head_dim // 4, dtype=np.float32) * 2 / (head_dim // 2)))


def axial_rotary(op, inv_freq: np.ndarray, row, col):
    """cos/sin [1, patches, head_dim/2]: rows rotate the first half of the
    frequencies, columns the second (transformers' axial 2-D RoPE)."""
    inv = op.Constant(value=ir.tensor(inv_freq.astype(np.float32)))
    last = op.Constant(value_ints=[-1])
    angles = op.Concat(
        op.Mul(op.Unsqueeze(op.Cast(row, to=ir.DataType.FLOAT), last), inv),
        op.Mul(op.Unsqueeze(op.Cast(col, to=ir.DataType.FLOAT), last), inv), axis=-1)
    angles = op.Unsqueeze(angles, op.Constant(value_ints=[0]))
    dtype = get_build_dtype()
    return op.Cast(op.Cos(angles), to=dtype), op.Cast(op.Sin(angles), to=dtype)


def patch_layout(op, pixel_values, image_grid_thw, merge: int, side: int | None = None) -> dict:
    """Per patch (int64 [patches]): its row and column in its frame, its frame, and
    (with ``side``, the window side in merged tokens) its attention window (unique
    across frames); also the grid's rows ``h`` and columns ``w`` (scalars)."""
    grid = op.Gather(image_grid_thw, op.Constant(value_int=0), axis=0)  # [3]: t, h, w
    h = op.Gather(grid, op.Constant(value_int=1), axis=0)
    w = op.Gather(grid, op.Constant(value_int=2), axis=0)

    def const(value):
        return op.Constant(value_int=value)

    count = op.Squeeze(op.Shape(pixel_values, start=0, end=1))
    index = op.Range(const(0), count, const(1))
    area = op.Mul(h, w)
    frame, within = op.Div(index, area), op.Mod(index, area)
    block, cell = op.Div(within, const(merge * merge)), op.Mod(within, const(merge * merge))
    blocks_per_row = op.Div(w, const(merge))
    block_row, block_col = op.Div(block, blocks_per_row), op.Mod(block, blocks_per_row)
    row = op.Add(op.Mul(block_row, const(merge)), op.Div(cell, const(merge)))
    col = op.Add(op.Mul(block_col, const(merge)), op.Mod(cell, const(merge)))
    layout = {"row": row, "col": col, "frame": frame, "h": h, "w": w}
    if side is None:
        return layout
    layout["window"] = op.Add(op.Mul(frame, area),
                              op.Add(op.Mul(op.Div(block_row, const(side)), blocks_per_row),
                                     op.Div(block_col, const(side))))
    return layout


def group_mask(op, group):
    """Additive mask [1, 1, patches, patches]: a patch sees the patches of its group."""
    same = op.Equal(op.Unsqueeze(group, op.Constant(value_ints=[1])),
                    op.Unsqueeze(group, op.Constant(value_ints=[0])))
    np_dtype = numpy_dtype(get_build_dtype())
    lowest = np.array(_most_negative(np_dtype), dtype=np_dtype)
    mask = op.Where(same, op.Constant(value=ir.tensor(np.array(0, dtype=np_dtype))),
                    op.Constant(value=ir.tensor(lowest)))
    return op.Unsqueeze(mask, op.Constant(value_ints=[0, 1]))
