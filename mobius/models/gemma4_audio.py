"""Gemma 4's audio tower (``model.audio_tower``, transformers' Gemma4AudioModel) and its
embedder into the text width (``model.embed_audio``).

input_features [b, frames, mel] (log-mel), input_features_mask [b, frames] (bool, True:
a real frame) -> audio_features [tokens, text hidden]: the real positions of every
clip, in order (a position is real when its frame 4 t is).

Subsampling (``subsample_conv_projection``): twice a 3 x 3 stride-2 conv (no bias, the
masked frames zeroed first) -> LayerNorm over channels (scale only) -> ReLU; the
channels x frequency flattened through ``input_proj_linear`` (its width is
subsampling_conv_channels[0] // 4 * [1], so mel must reduce to
subsampling_conv_channels[0] // 4 bins). Per layer (a conformer block): half-step
feed-forward (clamp, RMSNorm, 4x up, act, down, clamp, RMSNorm, x residual_weight,
+ residual), chunked relative-position attention
(mobius/components/chunked_attention.py) between RMSNorms, a light conv (RMSNorm,
GLU, causal depthwise conv of conv_kernel_size, clamp, RMSNorm, act, projection,
+ residual), a second feed-forward, RMSNorm. ``output_proj`` (with bias) to
output_proj_dims; the embedder: scale-free RMSNorm, projection. Clamps are at
+-gradient_clipping; with use_clipped_linears each projection clamps its input and
output to the checkpoint's scalar bounds.
"""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.causal_transformer import scalar
from mobius.components.chunked_attention import (ChunkedRelativeAttention, ChunkGeometry,
                                                 block_index, block_mask)
from mobius.components.linear import Linear
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.config.options import read_options
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.gemma4_vision import ClippableLinear, Gemma4MultimodalEmbedder
from mobius.weights.dtypes import numpy_dtype

F32_MAX = float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class Gemma4AudioOptions:
    """audio_config, with transformers' Gemma4AudioConfig defaults."""

    hidden_size: int = 1024
    num_hidden_layers: int = 12
    num_attention_heads: int = 8
    hidden_act: str = "silu"
    subsampling_conv_channels: tuple[int, ...] = (128, 32)
    conv_kernel_size: int = 5
    residual_weight: float = 0.5
    attention_chunk_size: int = 12
    attention_context_left: int = 13
    attention_context_right: int = 0
    attention_logit_cap: float = 50.0
    attention_invalid_logits_value: float = -1.0e9
    use_clipped_linears: bool = True
    rms_norm_eps: float = 1e-6
    gradient_clipping: float = 1e10
    output_proj_dims: int = 1536

    @property
    def geometry(self) -> ChunkGeometry:
        return ChunkGeometry(self.attention_chunk_size, self.attention_context_left - 1,
                             self.attention_context_right)

    @property
    def mel_bins(self) -> int:
        """The log-mel width the projection expects (two halvings to channels[0] // 4)."""
        return self.subsampling_conv_channels[0] // 4 * 4

    @property
    def clip(self) -> float:
        return min(self.gradient_clipping, F32_MAX)


def audio_options(raw: dict | None) -> Gemma4AudioOptions:
    """The checked audio_config; values transformers cannot run are refused."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json: gemma4: audio_config (the audio tower) is missing")
    o = read_options(Gemma4AudioOptions, raw)
    checks = (
        (len(o.subsampling_conv_channels) == 2, "subsampling_conv_channels (two convs only)"),
        (o.hidden_size % o.num_attention_heads == 0,
         "hidden_size not a multiple of num_attention_heads"),
        (o.hidden_size % 2 == 0, f"hidden_size {o.hidden_size} (odd)"),
        (o.attention_chunk_size > 0, "attention_chunk_size below 1"),
        (o.attention_context_left >= 1, "attention_context_left below 1"),
        (o.attention_context_right >= 0, "attention_context_right below 0"),
    )
    for ok, what in checks:
        if not ok:
            raise ConfigError(f"config.json: gemma4: audio_config {what}: not supported")
    return o


def _clamp(op, x, bound: float):
    """x within +-bound (the build dtype's largest value at most)."""
    dtype = numpy_dtype(get_build_dtype())
    bound = min(bound, float(_finfo(dtype).max))
    return op.Clip(x, scalar(op, -bound), scalar(op, bound))


def _finfo(dtype):
    return ml_dtypes.finfo(dtype) if dtype == ml_dtypes.bfloat16 else np.finfo(dtype)


class _Tensor(nn.Module):
    """A submodule holding one ``weight`` (a torch Conv's or LayerNorm's)."""

    def __init__(self, shape: list[int]):
        super().__init__()
        self.weight = Weight(shape)

    def forward(self, op):
        return self.weight


class _SubsampleLayer(nn.Module):
    """``conv`` (3 x 3, stride 2, no bias) -> ``norm`` (LayerNorm, scale only) -> ReLU."""

    def __init__(self, in_ch: int, out_ch: int, eps: float):
        super().__init__()
        self.conv, self.norm = _Tensor([out_ch, in_ch, 3, 3]), _Tensor([out_ch])
        self.eps = eps

    def forward(self, op, x, mask):
        """x [b, c, t, f], mask [b, t] bool -> ([b, c', ceil(t / 2), ceil(f / 2)], mask)."""
        keep = op.Unsqueeze(op.Cast(mask, to=get_build_dtype()), op.Constant(value_ints=[1, 3]))
        y = op.Conv(op.Mul(x, keep), self.conv(op), strides=[2, 2], pads=[1, 1, 1, 1])
        y = op.Transpose(y, perm=[0, 2, 3, 1])
        y = op.LayerNormalization(y, self.norm(op), axis=-1, epsilon=self.eps)
        y = op.Transpose(op.Relu(y), perm=[0, 3, 1, 2])
        half = op.Slice(mask, op.Constant(value_ints=[0]), op.Constant(value_ints=[2 ** 62]),
                        op.Constant(value_ints=[1]), op.Constant(value_ints=[2]))
        return y, half


class _Subsampling(nn.Module):
    """``subsample_conv_projection``: two _SubsampleLayers, ``input_proj_linear``."""

    def __init__(self, o: Gemma4AudioOptions):
        super().__init__()
        first, second = o.subsampling_conv_channels
        self.layer0 = _SubsampleLayer(1, first, o.rms_norm_eps)
        self.layer1 = _SubsampleLayer(first, second, o.rms_norm_eps)
        self.input_proj_linear = Linear(first // 4 * second, o.hidden_size)

    def forward(self, op, features, mask):
        x, mask = self.layer0(op, op.Unsqueeze(features, op.Constant(value_ints=[1])), mask)
        x, mask = self.layer1(op, x, mask)
        x = op.Reshape(op.Transpose(x, perm=[0, 2, 3, 1]), op.Constant(value_ints=[0, 0, -1]))
        return self.input_proj_linear(op, x), mask


class _FeedForward(nn.Module):
    def __init__(self, o: Gemma4AudioOptions):
        super().__init__()
        hidden, clipped = o.hidden_size, o.use_clipped_linears
        self.ffw_layer_1 = ClippableLinear(hidden, 4 * hidden, clipped)
        self.ffw_layer_2 = ClippableLinear(4 * hidden, hidden, clipped)
        self.pre_layer_norm, self.post_layer_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.act, self.clip, self.scale = o.hidden_act, o.clip, o.residual_weight

    def forward(self, op, x):
        y = self.pre_layer_norm(op, _clamp(op, x, self.clip))
        y = self.ffw_layer_2(op, apply_activation(op, self.ffw_layer_1(op, y), self.act))
        y = self.post_layer_norm(op, _clamp(op, y, self.clip))
        return op.Add(op.Mul(y, scalar(op, self.scale)), x)


class _LightConv(nn.Module):
    """``lconv1d``: GLU, causal depthwise conv, act, projection, + residual."""

    def __init__(self, o: Gemma4AudioOptions):
        super().__init__()
        hidden, clipped, eps = o.hidden_size, o.use_clipped_linears, o.rms_norm_eps
        self.linear_start = ClippableLinear(hidden, 2 * hidden, clipped)
        self.linear_end = ClippableLinear(hidden, hidden, clipped)
        self.depthwise_conv1d = _Tensor([hidden, 1, o.conv_kernel_size])
        self.pre_layer_norm, self.conv_norm = RMSNorm(hidden, eps), RMSNorm(hidden, eps)
        self.hidden, self.kernel, self.act, self.clip = (hidden, o.conv_kernel_size,
                                                        o.hidden_act, o.clip)

    def forward(self, op, x):
        y = self.linear_start(op, self.pre_layer_norm(op, x))
        value, gate = op.Split(y, op.Constant(value_ints=[self.hidden, self.hidden]), axis=-1,
                               _outputs=2)
        y = op.Transpose(op.Mul(value, op.Sigmoid(gate)), perm=[0, 2, 1])
        y = op.Conv(y, self.depthwise_conv1d(op), group=self.hidden,
                    pads=[self.kernel - 1, 0])
        y = self.conv_norm(op, _clamp(op, op.Transpose(y, perm=[0, 2, 1]), self.clip))
        return op.Add(self.linear_end(op, apply_activation(op, y, self.act)), x)


class Gemma4AudioLayer(nn.Module):
    def __init__(self, o: Gemma4AudioOptions):
        super().__init__()
        hidden, clipped = o.hidden_size, o.use_clipped_linears
        self.feed_forward1, self.feed_forward2 = _FeedForward(o), _FeedForward(o)
        self.self_attn = ChunkedRelativeAttention(
            hidden, o.num_attention_heads, o.geometry, o.attention_logit_cap,
            o.attention_invalid_logits_value,
            lambda i, n: ClippableLinear(i, n, clipped))
        self.lconv1d = _LightConv(o)
        self.norm_pre_attn, self.norm_post_attn = RMSNorm(hidden), RMSNorm(hidden)
        self.norm_out = RMSNorm(hidden)
        self.clip = o.clip

    def forward(self, op, x, allowed, index, blocks):
        x = self.feed_forward1(op, x)
        y = self.norm_pre_attn(op, _clamp(op, x, self.clip))
        y = self.self_attn(op, y, allowed, index, blocks)
        x = op.Add(self.norm_post_attn(op, _clamp(op, y, self.clip)), x)
        x = self.feed_forward2(op, self.lconv1d(op, x))
        return self.norm_out(op, _clamp(op, x, self.clip))


class Gemma4AudioModel(nn.Module):
    """``model.audio_tower``: -> (hidden [b, t, output_proj_dims], valid [b, t] bool)."""

    def __init__(self, o: Gemma4AudioOptions):
        super().__init__()
        self.subsample_conv_projection = _Subsampling(o)
        self.layers = nn.ModuleList([Gemma4AudioLayer(o) for _ in range(o.num_hidden_layers)])
        self.output_proj = Linear(o.hidden_size, o.output_proj_dims, bias=True)
        self.geometry = o.geometry

    def forward(self, op, features, mask):
        x, valid = self.subsample_conv_projection(op, features, mask)
        blocks, index = block_index(op, op.Shape(x, start=1, end=2), self.geometry)
        allowed = block_mask(op, valid, index, self.geometry)
        for layer in self.layers:
            x = layer(op, x, allowed, index, blocks)
        return self.output_proj(op, x), valid


class Gemma4AudioEncoder(nn.Module):
    """``audio_tower`` then ``embed_audio``: the real positions' soft tokens
    [tokens, text_hidden], every clip's in order."""

    def __init__(self, o: Gemma4AudioOptions, text_hidden: int):
        super().__init__()
        self.audio_tower = Gemma4AudioModel(o)
        self.embed_audio = Gemma4MultimodalEmbedder(o.output_proj_dims, text_hidden,
                                                    o.rms_norm_eps)

    def forward(self, op, features, mask):
        hidden, valid = self.audio_tower(op, features, op.Cast(mask, to=ir.DataType.BOOL))
        tokens = self.embed_audio(op, hidden)
        return real_tokens(op, tokens, valid)


def real_tokens(op, tokens, valid):
    """tokens [b, t, width] at every True of valid [b, t], row-major: [n, width]."""
    return op.GatherND(tokens, op.Transpose(op.NonZero(valid), perm=[1, 0]))
