"""LFM3-VL's vision tower: a linear patch embedding and RMSNorm, then LFM-style layers
(operator_norm -> gated 2-D short convolution or attention -> residual; ffn_norm ->
SwiGLU w1/w3/w2 -> residual) over the flattened patches Qwen's processors cut.

Inputs as Qwen2.5-VL's tower takes them (mobius/models/qwen2_5_vl_vision.py): pixel_values
[patches, channels * temporal_patch * patch^2], each spatial_merge^2 block consecutive,
and image_grid_thw [images, 3]; every image of one call shares one grid. Output: the
tower's last hidden state [1, patches, hidden] (no final norm).

* attention (``full_attention`` layers): q/k/v_proj and out_proj without biases,
  grouped-query (num_key_value_heads), RMSNorm per head on q and k, then axial 2-D RoPE
  (rows rotate the first half of the frequencies, columns the second; theta from
  rope_parameters, default 1e6), bidirectional within each frame. Saved names:
  q_layernorm / k_layernorm (transformers' q_norm / k_norm), patchifier (patch_embed).
* short conv (``conv`` layers): in_proj -> (input gate, output gate, x); the gated x of
  each frame goes to its raster grid, through a depthwise Conv2d (conv_kernel_size, zero
  padding kernel // 2, no bias), back to merge-block order, times the output gate, then
  out_proj. Here the two reorders are Gathers by index: merge order -> raster order and
  back, so each frame is one [channels, rows, columns] image of the Conv's batch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention import scaled_dot_product_attention
from mobius.components.linear import Linear
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.config.fields import positive_int
from mobius.errors import ConfigError
from mobius.models.qwen2_5_vl_vision import (axial_inv_freq, axial_rotary, group_mask,
                                             patch_layout)

CONV, FULL = "conv", "full_attention"
#: Lfm3VlVisionConfig's defaults (transformers), for keys config.json leaves out.
VISION_DEFAULTS: Mapping[str, Any] = {
    "hidden_size": 1024, "intermediate_size": 2560, "num_hidden_layers": 14,
    "num_attention_heads": 16, "num_key_value_heads": 8, "in_channels": 3, "patch_size": 16,
    "spatial_merge_size": 2, "temporal_patch_size": 2, "conv_kernel_size": 3,
    "norm_eps": 1e-5,
}
_THETA = 1e6  # Lfm3VlVisionConfig.default_theta


@dataclasses.dataclass(frozen=True)
class Lfm3VisionConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    in_channels: int
    patch_size: int
    spatial_merge_size: int
    temporal_patch_size: int
    conv_kernel_size: int
    norm_eps: float
    layer_types: tuple[str, ...]
    rope_theta: float

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Lfm3VisionConfig":
        raw = {**VISION_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
        ints = {key: positive_int(f"vision_config.{key}", raw[key]) for key in (
            "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "in_channels", "patch_size", "spatial_merge_size",
            "temporal_patch_size", "conv_kernel_size")}
        layers = ints["num_hidden_layers"]
        kinds = raw.get("layer_types") or [CONV if i < 2 or i % 2 else FULL
                                           for i in range(layers)]
        rope = raw.get("rope_parameters") or {}
        if rope.get("rope_type", "axial") != "axial":
            raise ConfigError(f"config.json: vision_config rope_type {rope['rope_type']!r} is "
                              f"not supported; supported: axial")
        config = cls(**ints, norm_eps=float(raw["norm_eps"]), layer_types=tuple(kinds),
                     rope_theta=float(rope.get("rope_theta", _THETA)))
        config.check()
        return config

    def check(self) -> None:
        bad = sorted({str(k) for k in self.layer_types} - {CONV, FULL})
        if bad or len(self.layer_types) != self.num_hidden_layers:
            raise ConfigError(f"config.json: vision_config layer_types must be "
                              f"{self.num_hidden_layers} of {CONV!r} / {FULL!r}, got "
                              f"{list(self.layer_types)}")
        if self.hidden_size % self.num_attention_heads or self.head_dim % 4:
            raise ConfigError(f"config.json: vision_config hidden_size {self.hidden_size} / "
                              f"num_attention_heads {self.num_attention_heads} must be a "
                              f"multiple of 4 (2-D RoPE)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"config.json: vision_config num_attention_heads "
                              f"{self.num_attention_heads} is not a multiple of "
                              f"num_key_value_heads {self.num_key_value_heads}")
        if self.conv_kernel_size % 2 == 0:
            raise ConfigError(f"config.json: vision_config conv_kernel_size "
                              f"{self.conv_kernel_size} must be odd (a same-size convolution)")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def patch_dim(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2


class VisionAttention(nn.Module):
    def __init__(self, config: Lfm3VisionConfig):
        super().__init__()
        d, hidden = config.head_dim, config.hidden_size
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads,
                                                    config.num_key_value_heads, d)
        self.q_proj = Linear(hidden, self.heads * d, False)
        self.k_proj = Linear(hidden, self.kv_heads * d, False)
        self.v_proj = Linear(hidden, self.kv_heads * d, False)
        self.out_proj = Linear(self.heads * d, hidden, False)
        # transformers' q_norm / k_norm, saved as q_layernorm / k_layernorm
        self.q_layernorm = RMSNorm(d, config.norm_eps)
        self.k_layernorm = RMSNorm(d, config.norm_eps)

    def forward(self, op, x, cos, sin, mask):
        """x [1, patches, hidden]."""
        q = self._heads(op, self.q_proj(op, x), self.q_layernorm)
        k = self._heads(op, self.k_proj(op, x), self.k_layernorm)
        v = self._heads(op, self.v_proj(op, x))
        q, k = op.RotaryEmbedding(q, cos, sin), op.RotaryEmbedding(k, cos, sin)
        attn, _, _ = scaled_dot_product_attention(op, q, k, v, mask, scale=self.head_dim ** -0.5)
        attn = op.Reshape(op.Transpose(attn, perm=[0, 2, 1, 3]),
                          op.Constant(value_ints=[0, 0, self.heads * self.head_dim]))
        return self.out_proj(op, attn)

    def _heads(self, op, x, norm=None):
        """[1, patches, heads * dim] -> [1, heads, patches, dim], RMS-normed per head."""
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, -1, self.head_dim]))
        if norm is not None:
            x = norm(op, x)
        return op.Transpose(x, perm=[0, 2, 1, 3])


class DepthwiseConv2d(nn.Module):
    """Conv2d(groups = channels, no bias): weight [channels, 1, k, k] as saved."""

    def __init__(self, channels: int, kernel: int):
        super().__init__()
        self.channels, self.kernel = channels, kernel
        self.weight = Weight([channels, 1, kernel, kernel])

    def forward(self, op, x):
        pad = self.kernel // 2
        return op.Conv(x, self.weight, group=self.channels, kernel_shape=[self.kernel] * 2,
                       pads=[pad] * 4)


class VisionShortConv(nn.Module):
    def __init__(self, config: Lfm3VisionConfig):
        super().__init__()
        hidden = self.hidden = config.hidden_size
        self.in_proj = Linear(hidden, 3 * hidden, False)
        self.spatial_conv = DepthwiseConv2d(hidden, config.conv_kernel_size)
        self.out_proj = Linear(hidden, hidden, False)

    def forward(self, op, x, order):
        """x [1, patches, hidden]; order: (to_raster, to_merge, grid [4]) of raster_order."""
        gate_in, gate_out, value = op.Split(self.in_proj(op, x), num_outputs=3, axis=-1,
                                            _outputs=3)
        to_raster, to_merge, grid = order
        flat = op.Squeeze(op.Mul(gate_in, value), op.Constant(value_ints=[0]))  # [patches, C]
        frames = op.Transpose(op.Reshape(op.Gather(flat, to_raster, axis=0), grid),
                              perm=[0, 3, 1, 2])  # [frames, C, rows, columns]
        conv = op.Transpose(self.spatial_conv(op, frames), perm=[0, 2, 3, 1])
        conv = op.Reshape(conv, op.Constant(value_ints=[-1, self.hidden]))
        conv = op.Unsqueeze(op.Gather(conv, to_merge, axis=0), op.Constant(value_ints=[0]))
        return self.out_proj(op, op.Mul(gate_out, conv))


class SwiGlu(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.w1, self.w3 = Linear(hidden, inner, False), Linear(hidden, inner, False)
        self.w2 = Linear(inner, hidden, False)

    def forward(self, op, x):
        return self.w2(op, op.Mul(apply_activation(op, self.w1(op, x), "silu"),
                                  self.w3(op, x)))


class VisionLayer(nn.Module):
    def __init__(self, config: Lfm3VisionConfig, kind: str):
        super().__init__()
        self.is_conv = kind == CONV
        if self.is_conv:
            self.conv = VisionShortConv(config)
        else:
            self.self_attn = VisionAttention(config)
        self.feed_forward = SwiGlu(config.hidden_size, config.intermediate_size)
        self.operator_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.ffn_norm = RMSNorm(config.hidden_size, config.norm_eps)

    def forward(self, op, x, rotary, mask, order):
        h = self.operator_norm(op, x)
        h = self.conv(op, h, order) if self.is_conv else self.self_attn(op, h, *rotary, mask)
        x = op.Add(x, h)
        return op.Add(x, self.feed_forward(op, self.ffn_norm(op, x)))


def raster_order(op, layout, merge: int, channels: int):
    """(to_raster [patches]: the merge-order patch at each raster slot; to_merge
    [patches]: the raster slot of each merge-order patch; the
    shape [frames, rows, columns, channels] of the raster grid)."""
    h, w = layout["h"], layout["w"]
    area = op.Mul(h, w)

    def const(value):
        return op.Constant(value_int=value)

    to_merge = op.Add(op.Mul(layout["frame"], area),
                      op.Add(op.Mul(layout["row"], w), layout["col"]))
    slot = op.Range(const(0), op.Squeeze(op.Shape(to_merge)), const(1))
    frame, within = op.Div(slot, area), op.Mod(slot, area)
    row, col = op.Div(within, w), op.Mod(within, w)
    block = op.Add(op.Mul(op.Div(row, const(merge)), op.Div(w, const(merge))),
                   op.Div(col, const(merge)))
    cell = op.Add(op.Mul(op.Mod(row, const(merge)), const(merge)), op.Mod(col, const(merge)))
    to_raster = op.Add(op.Mul(frame, area), op.Add(op.Mul(block, const(merge * merge)), cell))
    last = op.Constant(value_ints=[-1])
    grid = op.Concat(last, op.Reshape(h, last), op.Reshape(w, last),
                     op.Constant(value_ints=[channels]), axis=0)
    return to_raster, to_merge, grid


class Lfm3VisionModel(nn.Module):
    """pixel_values [patches, patch_dim], image_grid_thw [images, 3] -> the last hidden
    state [1, patches, hidden]."""

    def __init__(self, config: Lfm3VisionConfig):
        super().__init__()
        self.config = config
        # transformers' patch_embed, saved as patchifier (its conversion mapping)
        self.patchifier = Linear(config.patch_dim, config.hidden_size, False)
        self.embedding_norm = RMSNorm(config.hidden_size, config.norm_eps)
        self.layers = nn.ModuleList([VisionLayer(config, kind) for kind in config.layer_types])
        self.inv_freq = axial_inv_freq(config.head_dim, config.rope_theta)

    def forward(self, op, pixel_values, image_grid_thw):
        merge = self.config.spatial_merge_size
        layout = patch_layout(op, pixel_values, image_grid_thw, merge)
        rotary = axial_rotary(op, self.inv_freq, layout["row"], layout["col"])
        mask = group_mask(op, layout["frame"])
        order = raster_order(op, layout, merge, self.config.hidden_size)
        x = self.embedding_norm(op, self.patchifier(op, op.Unsqueeze(
            pixel_values, op.Constant(value_ints=[0]))))
        for layer in self.layers:
            x = layer(op, x, rotary, mask, order)
        return x
