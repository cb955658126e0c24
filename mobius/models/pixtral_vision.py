"""Pixtral's vision tower (Mistral 3's ``vision_tower``): a bias-free patch
convolution, ``ln_pre`` RMSNorm, then pre-norm layers (RMSNorm, attention with
axial 2-D rotary over each patch's row and column, RMSNorm, gated MLP). No
position table and no final norm: any image size whose sides are multiples of
the patch works, so the graph's height and width are dynamic.

The graph takes images of one size at a time ([images, C, H, W]: each image
attends only to its own patches, which is what transformers' block mask does
for a batch); onnxruntime-genai calls it once per image when the sizes differ.
Returns every hidden state (index 0 = after ``ln_pre``, i = after layer i), as
transformers' ``hidden_states`` that ``vision_feature_layer`` indexes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.config.fields import finite_float, positive_int
from mobius.context import get_build_dtype
from mobius.errors import ConfigError, UnsupportedModelError

#: PixtralVisionConfig's defaults as Mistral3Config fills them in (transformers)
PIXTRAL_DEFAULTS: Mapping[str, Any] = {
    "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
    "num_attention_heads": 16, "num_channels": 3, "image_size": 1540, "patch_size": 14,
    "hidden_act": "gelu",
}
_NORM_EPS = 1e-5  # PixtralRMSNorm in ln_pre and every layer


@dataclasses.dataclass(frozen=True)
class PixtralConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_channels: int
    patch_size: int
    image_size: int
    hidden_act: str
    rope_theta: float

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "PixtralConfig":
        values = {**PIXTRAL_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
        if isinstance(values["image_size"], (list, tuple)) and values["image_size"]:
            values["image_size"] = max(values["image_size"])  # (height, width): the longest edge
        if values.get("model_type", "pixtral") != "pixtral":
            raise UnsupportedModelError(f"mistral3: vision tower {values['model_type']!r} is "
                                        f"not supported; supported: pixtral")
        ints = {key: positive_int(f"vision_config.{key}", values[key]) for key in (
            "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_channels", "patch_size", "image_size")}
        rope = values.get("rope_parameters") or {}
        kind = rope.get("rope_type", "axial")
        if kind != "axial":
            raise UnsupportedModelError(f"mistral3: vision rope_type {kind!r} is not supported; "
                                        f"supported: axial")
        theta = rope.get("rope_theta", values.get("rope_theta", 10000.0))
        config = cls(**ints, hidden_act=str(values["hidden_act"]), rope_theta=finite_float(
            "vision_config.rope_theta", theta, positive=True))
        if config.hidden_size % config.num_attention_heads or config.head_dim % 4:
            raise ConfigError(f"vision_config: hidden_size {config.hidden_size} / "
                              f"num_attention_heads {config.num_attention_heads} must be a "
                              f"multiple of 4 (axial 2-D rotary)")
        return config

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["rope_parameters"] = {"rope_type": "axial", "rope_theta": out.pop("rope_theta")}
        return {"model_type": "pixtral", **out}


def axial_frequencies(config: PixtralConfig) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) frequencies [head_dim / 2] each: the first quarter of the rotated
    pairs turns with the patch's row (even-indexed inverse frequencies), the second
    with its column (odd-indexed); the other's entries are 0."""
    dim = config.head_dim
    inv = 1.0 / (config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    zeros = np.zeros(dim // 4)
    return (np.concatenate([inv[0::2], zeros]).astype(np.float32),
            np.concatenate([zeros, inv[1::2]]).astype(np.float32))


class PixtralAttention(nn.Module):
    def __init__(self, config: PixtralConfig):
        super().__init__()
        hidden = config.hidden_size
        self.heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.q_proj, self.k_proj = Linear(hidden, hidden), Linear(hidden, hidden)
        self.v_proj, self.o_proj = Linear(hidden, hidden), Linear(hidden, hidden)

    def _heads(self, op, x):
        shaped = op.Reshape(x, op.Constant(value_ints=[0, 0, self.heads, self.head_dim]))
        return op.Transpose(shaped, perm=[0, 2, 1, 3])

    def forward(self, op, x, cos, sin):
        q = rotate(op, self._heads(op, self.q_proj(op, x)), cos, sin)
        k = rotate(op, self._heads(op, self.k_proj(op, x)), cos, sin)
        v = self._heads(op, self.v_proj(op, x))
        attn = op.Attention(q, k, v, is_causal=0, scale=float(self.head_dim ** -0.5))
        attn = op.Reshape(op.Transpose(attn, perm=[0, 2, 1, 3]),
                          op.Constant(value_ints=[0, 0, self.heads * self.head_dim]))
        return self.o_proj(op, attn)


def rotate(op, x, cos, sin):
    """x * cos + rotate_half(x) * sin; cos/sin [patches, head_dim] broadcast over images, heads."""
    first, second = op.Split(x, num_outputs=2, axis=-1, _outputs=2)
    half = op.Concat(op.Neg(second), first, axis=-1)
    return op.Add(op.Mul(x, cos), op.Mul(half, sin))


class PixtralLayer(nn.Module):
    def __init__(self, config: PixtralConfig):
        super().__init__()
        self.attention_norm = RMSNorm(config.hidden_size, _NORM_EPS)
        self.attention = PixtralAttention(config)
        self.ffn_norm = RMSNorm(config.hidden_size, _NORM_EPS)
        self.feed_forward = GatedMLP(config.hidden_size, config.intermediate_size,
                                     config.hidden_act)

    def forward(self, op, x, cos, sin):
        x = op.Add(x, self.attention(op, self.attention_norm(op, x), cos, sin))
        return op.Add(x, self.feed_forward(op, self.ffn_norm(op, x)))


class _Transformer(nn.Module):
    def __init__(self, config: PixtralConfig, num_layers: int):
        super().__init__()
        self.layers = nn.ModuleList([PixtralLayer(config) for _ in range(num_layers)])


class _PatchConv(nn.Module):
    """``patch_conv``: Conv2d(kernel = stride = patch), no bias."""

    def __init__(self, config: PixtralConfig):
        super().__init__()
        patch = config.patch_size
        self.patch = patch
        self.weight = Weight([config.hidden_size, config.num_channels, patch, patch])

    def forward(self, op, pixels):
        return op.Conv(pixels, self.weight, kernel_shape=[self.patch] * 2,
                       strides=[self.patch] * 2)


class PixtralVisionModel(nn.Module):
    """pixel_values [images, C, H, W] -> (hidden states [images, rows * cols, hidden] for
    0..num_layers, (rows, cols) int64 scalars of the patch grid)."""

    def __init__(self, config: PixtralConfig, num_layers: int | None = None):
        super().__init__()
        self.config = config
        self.patch_conv = _PatchConv(config)
        self.ln_pre = RMSNorm(config.hidden_size, _NORM_EPS)
        self.transformer = _Transformer(config, config.num_hidden_layers
                                        if num_layers is None else num_layers)
        self.row_freq, self.col_freq = axial_frequencies(config)

    def forward(self, op, pixel_values):
        grid = self.patch_conv(op, pixel_values)  # [images, hidden, rows, cols]
        rows = op.Squeeze(op.Shape(grid, start=2, end=3))
        cols = op.Squeeze(op.Shape(grid, start=3, end=4))
        tokens = op.Transpose(op.Reshape(grid, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])
        x = self.ln_pre(op, tokens)
        cos, sin = self._rotary(op, rows, cols)
        states = [x]
        for layer in self.transformer.layers:
            x = layer(op, x, cos, sin)
            states.append(x)
        return states, (rows, cols)

    def _rotary(self, op, rows, cols):
        """cos/sin [rows * cols, head_dim], patches row-major (transformers' meshgrid 'ij')."""
        def const(value):
            return op.Constant(value_int=value)

        index = op.Range(const(0), op.Mul(rows, cols), const(1))
        row = op.Cast(op.Div(index, cols), to=ir.DataType.FLOAT)
        col = op.Cast(op.Mod(index, cols), to=ir.DataType.FLOAT)
        last = op.Constant(value_ints=[-1])
        row_freq = op.Constant(value=ir.tensor(self.row_freq))
        col_freq = op.Constant(value=ir.tensor(self.col_freq))
        angles = op.Add(op.Mul(op.Unsqueeze(row, last), row_freq),
                        op.Mul(op.Unsqueeze(col, last), col_freq))
        angles = op.Concat(angles, angles, axis=-1)
        dtype = get_build_dtype()
        return op.Cast(op.Cos(angles), to=dtype), op.Cast(op.Sin(angles), to=dtype)
