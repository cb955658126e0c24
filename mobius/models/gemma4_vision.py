"""Gemma 4's vision tower (``model.vision_tower``) and its embedder (``model.embed_vision``).

The image processor hands the tower patches, not pixels: pixel_values [images, patches,
3 * patch^2] in [0, 1] with each patch's (x, y) in pixel_position_ids [images, patches, 2]
((-1, -1) marks a padding patch). The tower:

* scales pixels to [-1, 1], projects each patch (no bias) and adds a learned x row and y
  row of ``position_embedding_table`` [2, position_embedding_size, hidden] (0 on padding);
* runs sandwich-normed layers (RMSNorm x w): Q and K normed per head, V by a scale-free
  norm, attention scale 1, bidirectional over the image's real patches; axial RoPE rotates
  the first half of each head by x and the second by y (rotate-half, theta from
  ``rope_parameters``); a GeGLU MLP. With ``use_clipped_linears`` each projection clamps
  its input and output to the checkpoint's bounds;
* averages each ``pooling_kernel_size``^2 block of patches (padding zeroed) into one soft
  token, x sqrt(hidden), with ``standardize`` (x - std_bias) * std_scale, in float32 as
  transformers does, and keeps only the tokens some patch falls in.

The embedder norms each token (no scale) and projects it to the text width. A build of
the tower alone refuses values transformers cannot run: a pooling kernel of 1 (its pooler
then keeps the padding tokens instead of the real ones), head_dim not a multiple of 4.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention import scaled_dot_product_attention
from mobius.components.attention_mask import padding_mask
from mobius.components.causal_transformer import scalar
from mobius.components.linear import Linear
from mobius.components.rms_norm import RMSNorm, UnitRMSNorm
from mobius.components.weight import Weight
from mobius.config.options import read_options
from mobius.context import get_build_dtype
from mobius.errors import ConfigError

FLOAT = ir.DataType.FLOAT


@dataclasses.dataclass(frozen=True)
class Gemma4VisionOptions:
    """vision_config, with transformers' Gemma4VisionConfig defaults."""

    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 16
    num_attention_heads: int = 12
    num_key_value_heads: int = 12
    head_dim: int = 64
    hidden_activation: str = "gelu_pytorch_tanh"
    rms_norm_eps: float = 1e-6
    rope_parameters: dict | None = None
    pooling_kernel_size: int = 3
    patch_size: int = 16
    position_embedding_size: int = 10 * 1024
    use_clipped_linears: bool = False
    standardize: bool = False

    @property
    def rope_theta(self) -> float:
        params = self.rope_parameters or {}
        return float(params.get("rope_theta", 100.0))


def vision_options(raw: dict | None) -> Gemma4VisionOptions:
    """The checked vision_config; values transformers cannot run are refused."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json: gemma4: vision_config (the vision tower) is missing")
    options = read_options(Gemma4VisionOptions, raw)
    rope = (options.rope_parameters or {}).get("rope_type", "axial")
    checks = ((rope == "axial", f"rope_type {rope!r} (axial only)"),
              (options.pooling_kernel_size >= 2, "pooling_kernel_size below 2"),
              (options.head_dim % 4 == 0, f"head_dim {options.head_dim} (not a multiple of 4)"),
              (options.num_attention_heads % options.num_key_value_heads == 0,
               "num_attention_heads not a multiple of num_key_value_heads"))
    for ok, what in checks:
        if not ok:
            raise ConfigError(f"config.json: gemma4: vision_config {what} is not supported")
    return options


class ClippableLinear(nn.Module):
    """``<name>.linear`` (no bias), clamped before and after to scalar bounds when clipped."""

    def __init__(self, in_features: int, out_features: int, clipped: bool):
        super().__init__()
        self.linear = Linear(in_features, out_features)
        self.clipped = clipped
        if clipped:
            self.input_min, self.input_max = Weight([]), Weight([])
            self.output_min, self.output_max = Weight([]), Weight([])

    def forward(self, op, x):
        if self.clipped:
            x = op.Clip(x, self.input_min, self.input_max)
        y = self.linear(op, x)
        return op.Clip(y, self.output_min, self.output_max) if self.clipped else y


def axial_rotary(op, positions, head_dim: int, theta: float):
    """(cos, sin) [images, patches, 1, 2, head_dim / 2]: x's angles, then y's."""
    quarter = head_dim // 4
    inv_freq = 1.0 / theta ** (np.arange(0, 2 * quarter, 2, dtype=np.float32) / (2 * quarter))
    freqs = op.Mul(op.Unsqueeze(op.Cast(positions, to=FLOAT), op.Constant(value_ints=[-1])),
                   op.Constant(value=ir.tensor(inv_freq.astype(np.float32))))  # [b, n, 2, q]
    angles = op.Unsqueeze(op.Concat(freqs, freqs, axis=-1), op.Constant(value_ints=[2]))
    dtype = get_build_dtype()
    return op.Cast(op.Cos(angles), to=dtype), op.Cast(op.Sin(angles), to=dtype)


def _rotate(op, x, cos, sin, head_dim: int):
    """x [b, n, heads, head_dim]: rotate-half RoPE on each half by its own angles."""
    half, quarter = head_dim // 2, head_dim // 4
    parts = op.Reshape(x, op.Constant(value_ints=[0, 0, 0, 2, half]))
    first, second = op.Split(parts, op.Constant(value_ints=[quarter, quarter]), axis=-1,
                             _outputs=2)
    rotated = op.Concat(op.Neg(second), first, axis=-1)
    out = op.Add(op.Mul(parts, cos), op.Mul(rotated, sin))
    return op.Reshape(out, op.Constant(value_ints=[0, 0, 0, head_dim]))


class Gemma4VisionAttention(nn.Module):
    def __init__(self, options: Gemma4VisionOptions):
        super().__init__()
        hidden, dim, clip = options.hidden_size, options.head_dim, options.use_clipped_linears
        self.head_dim = dim
        self.q_proj = ClippableLinear(hidden, options.num_attention_heads * dim, clip)
        self.k_proj = ClippableLinear(hidden, options.num_key_value_heads * dim, clip)
        self.v_proj = ClippableLinear(hidden, options.num_key_value_heads * dim, clip)
        self.o_proj = ClippableLinear(options.num_attention_heads * dim, hidden, clip)
        self.q_norm = RMSNorm(dim, options.rms_norm_eps)
        self.k_norm = RMSNorm(dim, options.rms_norm_eps)
        self.v_norm = UnitRMSNorm(dim, options.rms_norm_eps)

    def _heads(self, op, x, proj, norm, rotary=None):
        heads = norm(op, op.Reshape(proj(op, x), op.Constant(value_ints=[0, 0, -1,
                                                                          self.head_dim])))
        if rotary is not None:
            heads = _rotate(op, heads, *rotary, self.head_dim)
        return op.Transpose(heads, perm=[0, 2, 1, 3])

    def forward(self, op, hidden, rotary, mask):
        q = self._heads(op, hidden, self.q_proj, self.q_norm, rotary)
        k = self._heads(op, hidden, self.k_proj, self.k_norm, rotary)
        v = self._heads(op, hidden, self.v_proj, self.v_norm)
        out, _, _ = scaled_dot_product_attention(op, q, k, v, mask, scale=1.0)
        out = op.Reshape(op.Transpose(out, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))
        return self.o_proj(op, out)


class Gemma4VisionMLP(nn.Module):
    def __init__(self, options: Gemma4VisionOptions):
        super().__init__()
        hidden, inter, clip = (options.hidden_size, options.intermediate_size,
                               options.use_clipped_linears)
        self.gate_proj = ClippableLinear(hidden, inter, clip)
        self.up_proj = ClippableLinear(hidden, inter, clip)
        self.down_proj = ClippableLinear(inter, hidden, clip)
        self.activation = options.hidden_activation

    def forward(self, op, x):
        gate = apply_activation(op, self.gate_proj(op, x), self.activation)
        return self.down_proj(op, op.Mul(gate, self.up_proj(op, x)))


class Gemma4VisionEncoderLayer(nn.Module):
    def __init__(self, options: Gemma4VisionOptions):
        super().__init__()
        size, eps = options.hidden_size, options.rms_norm_eps
        self.self_attn = Gemma4VisionAttention(options)
        self.mlp = Gemma4VisionMLP(options)
        self.input_layernorm = RMSNorm(size, eps)
        self.post_attention_layernorm = RMSNorm(size, eps)
        self.pre_feedforward_layernorm = RMSNorm(size, eps)
        self.post_feedforward_layernorm = RMSNorm(size, eps)

    def forward(self, op, hidden, rotary, mask):
        attn = self.self_attn(op, self.input_layernorm(op, hidden), rotary, mask)
        hidden = op.Add(hidden, self.post_attention_layernorm(op, attn))
        mlp = self.mlp(op, self.pre_feedforward_layernorm(op, hidden))
        return op.Add(hidden, self.post_feedforward_layernorm(op, mlp))


class Gemma4VisionPatchEmbedder(nn.Module):
    def __init__(self, options: Gemma4VisionOptions):
        super().__init__()
        self.input_proj = Linear(3 * options.patch_size**2, options.hidden_size)
        self.position_embedding_table = Weight([2, options.position_embedding_size,
                                                options.hidden_size])

    def forward(self, op, pixel_values, positions, is_padding):
        pixels = op.Mul(op.Sub(pixel_values, scalar(op, 0.5)), scalar(op, 2.0))
        clamped = op.Max(positions, op.Constant(value=ir.tensor(np.array(0, np.int64))))
        rows = [op.Gather(op.Gather(self.position_embedding_table, op.Constant(value_int=axis)),
                          op.Gather(clamped, op.Constant(value_int=axis), axis=2))
                for axis in (0, 1)]
        where = op.Unsqueeze(is_padding, op.Constant(value_ints=[-1]))
        embedded = op.Where(where, scalar(op, 0.0), op.Add(*rows))
        return op.Add(self.input_proj(op, pixels), embedded)


class _Encoder(nn.Module):
    def __init__(self, options: Gemma4VisionOptions):
        super().__init__()
        self.layers = nn.ModuleList([Gemma4VisionEncoderLayer(options)
                                     for _ in range(options.num_hidden_layers)])


class Gemma4VisionModel(nn.Module):
    """pixel_values, pixel_position_ids -> the real soft tokens [tokens, vision hidden]."""

    def __init__(self, options: Gemma4VisionOptions):
        super().__init__()
        self.options = options
        self.patch_embedder = Gemma4VisionPatchEmbedder(options)
        self.encoder = _Encoder(options)
        if options.standardize:
            self.std_bias = Weight([options.hidden_size], dtype=FLOAT)
            self.std_scale = Weight([options.hidden_size], dtype=FLOAT)

    def forward(self, op, pixel_values, positions):
        options = self.options
        is_padding = op.And(*(op.Equal(op.Gather(positions, op.Constant(value_int=i), axis=2),
                                       op.Constant(value_int=-1)) for i in (0, 1)))
        real = op.Cast(op.Not(is_padding), to=ir.DataType.INT64)
        mask = padding_mask(op, real, get_build_dtype())
        rotary = axial_rotary(op, positions, options.head_dim, options.rope_theta)
        hidden = self.patch_embedder(op, pixel_values, positions, is_padding)
        for layer in self.encoder.layers:
            hidden = layer(op, hidden, rotary, mask)
        hidden = op.Where(op.Unsqueeze(is_padding, op.Constant(value_ints=[-1])),
                          scalar(op, 0.0), hidden)
        return self._pool(op, hidden, positions)

    def _pool(self, op, hidden, positions):
        """Each kernel x kernel block of patches averaged into one token (float32), scaled,
        standardized; the tokens no patch falls in dropped."""
        options = self.options
        k = options.pooling_kernel_size
        kk = op.Constant(value=ir.tensor(np.array(k, np.int64)))
        clamped = op.Max(positions, op.Constant(value=ir.tensor(np.array(0, np.int64))))
        x, y = (op.Gather(clamped, op.Constant(value_int=i), axis=2) for i in (0, 1))
        columns = op.Div(op.Add(op.ReduceMax(x, op.Constant(value_ints=[1]), keepdims=1),
                                op.Constant(value_int=1)), kk)  # [images, 1]
        token = op.Add(op.Div(x, kk), op.Mul(columns, op.Div(y, kk)))  # [images, patches]
        count = op.Div(op.Shape(hidden, start=1, end=2), op.Constant(value_ints=[k * k]))
        slots = op.Range(op.Constant(value_int=0), op.Squeeze(count), op.Constant(value_int=1))
        member = op.Equal(op.Unsqueeze(token, op.Constant(value_ints=[-1])), slots)
        weights = op.Div(op.Cast(member, to=FLOAT), op.Constant(value_float=float(k * k)))
        pooled = op.MatMul(op.Transpose(weights, perm=[0, 2, 1]), op.Cast(hidden, to=FLOAT))
        pooled = op.Mul(pooled, op.Constant(value_float=float(options.hidden_size) ** 0.5))
        if options.standardize:
            pooled = op.Mul(op.Sub(pooled, self.std_bias), self.std_scale)
        used = op.Cast(op.ReduceMax(op.Cast(member, to=ir.DataType.INT64),
                                    op.Constant(value_ints=[1]), keepdims=0), to=ir.DataType.BOOL)
        flat = op.Reshape(pooled, op.Constant(value_ints=[-1, options.hidden_size]))
        kept = op.Compress(flat, op.Reshape(used, op.Constant(value_ints=[-1])), axis=0)
        return op.Cast(kept, to=get_build_dtype())


class Gemma4MultimodalEmbedder(nn.Module):
    """Scale-free RMSNorm, then ``embedding_projection`` to the text width."""

    def __init__(self, size: int, text_hidden: int, eps: float):
        super().__init__()
        self.embedding_pre_projection_norm = UnitRMSNorm(size, eps)
        self.embedding_projection = Linear(size, text_hidden)

    def forward(self, op, x):
        return self.embedding_projection(op, self.embedding_pre_projection_norm(op, x))
