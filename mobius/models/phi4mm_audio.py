"""Phi-4-multimodal's speech path (``model.embed_tokens_extend.audio_embed``): the
conformer encoder and its projections, as the speech model of genai's phi4mm type.

audio_embeds [audios, frames, mel] (log-mel), audio_attention_mask [audios, frames]
(bool), audio_sizes [audios] (each audio's token count), audio_projection_mode [1]
(genai's 2 = speech + text, 3 = vision + speech + text) -> audio_features
[tokens, text hidden]: each audio's first audio_sizes[i] encoder positions, in order.

Encoder (transformers' Phi4MultimodalAudioModel): global mean / inverse-std norm;
NeMo striding subsampling (a 3 x 3 stride-2 conv, then depthwise + pointwise
stride-2 convs, ReLU, log2(time_reduction) in all; the channels x frequency
flattened through ``out``); positions cut into chunks of at most 500 (the last
padded), each attending within itself; per block: x + 0.5 FFN(x), attention over
LayerNorm with per-head relative-position biases (``bias_max_distance``) plus the
valid-key mask added as +1 (transformers adds the boolean mask, it does not
exclude padded keys), a GLU / causal depthwise conv module, x + 0.5 FFN(x),
LayerNorm. Streaming chunks (``chunk_size`` > 0) limit each position to its
chunk and ``left_chunk`` chunks before it. Projection: up, exact GELU, down, the
``*_for_vision_speech`` pair when an image is in the prompt (mode 3).
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.errors import ConfigError

I64, F32 = ir.DataType.INT64, ir.DataType.FLOAT
CHUNK = 500  # transformers' max_seq_len: longer encodings are cut into chunks of this


def _ints(op, *values):
    return op.Constant(value_ints=list(values))


def _i64(op, value: int):
    return op.Constant(value_int=value)


class _Conv(nn.Module):
    """A torch Conv (weight [out, in / groups, *kernel] + bias) on channels-first input."""

    def __init__(self, out_ch: int, in_ch: int, kernel: tuple[int, ...], groups: int = 1):
        super().__init__()
        self.weight = Weight([out_ch, in_ch // groups, *kernel])
        self.bias = Weight([out_ch])
        self.groups = groups

    def forward(self, op, x, strides, pads):
        return op.Conv(x, self.weight, self.bias, strides=strides, pads=pads, group=self.groups)


class _Pointwise(nn.Module):
    """A kernel-1 Conv1d as a MatMul on channels-last input."""

    def __init__(self, out_ch: int, in_ch: int):
        super().__init__()
        self.weight = Weight([in_ch, out_ch], checkpoint_shape=[out_ch, in_ch, 1],
                             transform=lambda a: np.ascontiguousarray(a[:, :, 0].T))
        self.bias = Weight([out_ch])

    def forward(self, op, x):
        return op.Add(op.MatMul(x, self.weight), self.bias)


class _Subsampling(nn.Module):
    """``embed``: NeMo's dw_striding subsampling; torch Sequential names (conv.0, conv.2,
    conv.3, ...: the ReLUs hold no weights)."""

    def __init__(self, a):
        super().__init__()
        channels, steps = a["nemo_conv_channels"], int(math.log2(a["time_reduction"]))
        self.steps, self.act = steps, a["nemo_activation"]
        self.conv = _Sequential(channels, steps)
        freq = a["input_size"]
        for _ in range(steps):
            freq = (freq - 1) // 2 + 1
        self.out = Linear(channels * freq, a["hidden_size"], True)

    def forward(self, op, x):
        x = self.conv(op, op.Unsqueeze(x, _ints(op, 1)), self.act)  # [B, C, T', F']
        x = op.Reshape(op.Transpose(x, perm=[0, 2, 1, 3]), _ints(op, 0, 0, -1))
        return self.out(op, x)


class _Sequential(nn.Module):
    def __init__(self, channels: int, steps: int):
        super().__init__()
        self.indices = [0]
        setattr(self, "0", _Conv(channels, 1, (3, 3)))
        for step in range(steps - 1):
            base = 2 + 3 * step
            setattr(self, str(base), _Conv(channels, channels, (3, 3), groups=channels))
            setattr(self, str(base + 1), _Conv(channels, channels, (1, 1)))
            self.indices += [base, base + 1]

    def forward(self, op, x, act: str):
        layers = [getattr(self, str(i)) for i in self.indices]
        x = apply_activation(op, layers[0](op, x, [2, 2], [1, 1, 1, 1]), act)
        for depthwise, pointwise in zip(layers[1::2], layers[2::2]):
            x = pointwise(op, depthwise(op, x, [2, 2], [1, 1, 1, 1]), [1, 1], [0, 0, 0, 0])
            x = apply_activation(op, x, act)
        return x


class _FeedForward(nn.Module):
    def __init__(self, a):
        super().__init__()
        hidden, inner = a["hidden_size"], a["intermediate_size"]
        self.layer_norm = LayerNorm(hidden)
        self.gate_up_proj = Linear(hidden, 2 * inner, True)
        self.down_proj = Linear(inner, hidden, True)
        self.inner, self.act = inner, a["activation"]

    def forward(self, op, x):
        both = self.gate_up_proj(op, self.layer_norm(op, x))
        up, gate = op.Split(both, _ints(op, self.inner, self.inner), axis=-1, _outputs=2)
        return self.down_proj(op, op.Mul(up, apply_activation(op, gate, self.act)))


class _Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        hidden = a["hidden_size"]
        self.heads, self.head_dim = a["num_attention_heads"], hidden // a["num_attention_heads"]
        self.q_proj, self.k_proj = Linear(hidden, hidden, True), Linear(hidden, hidden, True)
        self.v_proj, self.o_proj = Linear(hidden, hidden, True), Linear(hidden, hidden, True)

    def forward(self, op, x, bias):
        def heads(y):
            y = op.Reshape(y, _ints(op, 0, 0, self.heads, self.head_dim))
            return op.Transpose(y, perm=[0, 2, 1, 3])

        q, k, v = (heads(p(op, x)) for p in (self.q_proj, self.k_proj, self.v_proj))
        out = op.Attention(q, k, v, bias, is_causal=0, scale=float(self.head_dim**-0.5))
        out = op.Reshape(op.Transpose(out, perm=[0, 2, 1, 3]), _ints(op, 0, 0, -1))
        return self.o_proj(op, out)


class _GluPointwise(nn.Module):
    def __init__(self, a):
        super().__init__()
        out = self.out = a["ext_pw_out_channel"]
        self.ext_pw_conv_1d = _Pointwise(2 * out, a["hidden_size"])
        self.b1 = Weight([out], checkpoint_shape=[1, out, 1], transform=lambda x: x.reshape(-1))
        self.b2 = Weight([out], checkpoint_shape=[1, out, 1], transform=lambda x: x.reshape(-1))
        self.act = a["conv_glu_type"]

    def forward(self, op, x):
        both = self.ext_pw_conv_1d(op, x)
        value, gate = op.Split(both, _ints(op, self.out, self.out), axis=-1, _outputs=2)
        return op.Mul(op.Add(value, self.b1),
                      apply_activation(op, op.Add(gate, self.b2), self.act))


class _DepthwiseSeparable(nn.Module):
    def __init__(self, a):
        super().__init__()
        hidden, mult = a["hidden_size"], a["depthwise_multiplier"]
        self.kernel = a["kernel_size"]
        self.dw_conv = _Conv(hidden * mult, hidden, (self.kernel,), groups=hidden)
        self.pw_conv = _Conv(a["depthwise_separable_out_channel"], hidden * mult, (1,))

    def forward(self, op, x):
        """[B, C, T] -> [B, C', T]: causal (the conv's right padding is cut off)."""
        pad = self.kernel - 1
        x = self.dw_conv(op, x, [1], [pad, pad])
        if pad:
            x = op.Slice(x, _ints(op, 0), _ints(op, -pad), _ints(op, 2))
        return self.pw_conv(op, x, [1], [0, 0])


class _ConvModule(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.layer_norm = LayerNorm(a["hidden_size"])
        self.glu = _GluPointwise(a)
        self.dw_sep_conv_1d = _DepthwiseSeparable(a)
        self.ext_pw_conv_1d = _Pointwise(a["ext_pw_out_channel"], a["hidden_size"])
        self.act = a["conv_activation"]

    def forward(self, op, x):
        x = op.Transpose(self.glu(op, self.layer_norm(op, x)), perm=[0, 2, 1])
        x = op.Transpose(self.dw_sep_conv_1d(op, x), perm=[0, 2, 1])
        return self.ext_pw_conv_1d(op, apply_activation(op, x, self.act))


class _ConformerLayer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.feed_forward_in = _FeedForward(a)
        self.self_attn = _Attention(a)
        self.conv = _ConvModule(a)
        self.feed_forward_out = _FeedForward(a)
        self.layer_norm_att = LayerNorm(a["hidden_size"])
        self.layer_norm = LayerNorm(a["hidden_size"])

    def forward(self, op, x, bias):
        half = op.CastLike(op.Constant(value_float=0.5), x)
        x = op.Add(x, op.Mul(half, self.feed_forward_in(op, x)))
        x = op.Add(x, self.self_attn(op, self.layer_norm_att(op, x), bias))
        x = op.Add(x, self.conv(op, x))
        x = op.Add(x, op.Mul(half, self.feed_forward_out(op, x)))
        return self.layer_norm(op, x)


class _Norm(nn.Module):
    """``encoder_embedding``: (x - global_mean) * global_invstd."""

    def __init__(self, size: int):
        super().__init__()
        self.global_mean, self.global_invstd = Weight([size]), Weight([size])

    def forward(self, op, x):
        return op.Mul(op.Sub(x, self.global_mean), self.global_invstd)


class _RelativeBias(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.max_distance, self.symmetric = a["bias_max_distance"], bool(a["bias_symmetric"])
        self.buckets = self.max_distance * (1 if self.symmetric else 2)
        self.bias_values = _Table(self.buckets, a["num_attention_heads"])

    def forward(self, op, length):
        """length (scalar int64) -> [1, heads, length, length]."""
        pos = op.Range(_i64(op, 0), length, _i64(op, 1))
        rel = op.Sub(op.Unsqueeze(pos, _ints(op, 0)), op.Unsqueeze(pos, _ints(op, 1)))
        rel = op.Clip(rel, _i64(op, -self.max_distance), _i64(op, self.max_distance - 1))
        index = op.Abs(rel) if self.symmetric else op.Add(rel, _i64(op, self.buckets // 2))
        bias = op.Gather(self.bias_values(op), index, axis=0)  # [L, L, heads]
        return op.Unsqueeze(op.Transpose(bias, perm=[2, 0, 1]), _ints(op, 0))


class _Table(nn.Module):
    def __init__(self, rows: int, cols: int):
        super().__init__()
        self.weight = Weight([rows, cols])

    def forward(self, op):
        return self.weight


class _Encoder(nn.Module):
    """``encoder``: [B, T, mel] + valid-frame mask [B, T] -> [B, ceil(T / reduction), hidden]."""

    def __init__(self, a):
        super().__init__()
        self.a = a
        self.encoder_embedding = _Norm(a["input_size"])
        self.embed = _Subsampling(a)
        self.relative_attention_bias_layer = _RelativeBias(a)
        self.encoders = nn.ModuleList([_ConformerLayer(a) for _ in range(a["num_blocks"])])

    def forward(self, op, feats, mask):
        a, hidden = self.a, self.a["hidden_size"]
        x = self.embed(op, self.encoder_embedding(op, feats))  # [B, S, hidden]
        frames = op.ReduceSum(op.Cast(mask, to=F32), _ints(op, 1), keepdims=1)  # [B, 1]
        valid_len = op.Cast(op.Ceil(op.Div(frames, op.Constant(value_float=float(
            a["time_reduction"])))), to=I64)
        length = op.Squeeze(op.Shape(x, start=1, end=2))  # S
        chunk = op.Min(length, _i64(op, CHUNK))
        pad = op.Mod(op.Sub(chunk, op.Mod(length, chunk)), chunk)
        valid = op.Less(op.Unsqueeze(op.Range(_i64(op, 0), op.Add(length, pad), _i64(op, 1)),
                                     _ints(op, 0)), valid_len)  # [B, S + pad]
        x = op.Pad(x, op.Concat(_ints(op, 0, 0, 0, 0), op.Unsqueeze(pad, _ints(op, 0)),
                                _ints(op, 0), axis=0))
        rows = op.Concat(_ints(op, -1), op.Unsqueeze(chunk, _ints(op, 0)), axis=0)
        x = op.Reshape(x, op.Concat(rows, _ints(op, hidden), axis=0))  # [B * n, L, hidden]
        keys = op.Reshape(valid, rows)  # [B * n, L]
        allowed = op.Unsqueeze(keys, _ints(op, 1, 2))  # [B * n, 1, 1, L]
        streaming = self._streaming(op, chunk)
        if streaming is not None:
            allowed = op.And(allowed, streaming)
        bias = op.Add(op.CastLike(allowed, x), op.CastLike(
            self.relative_attention_bias_layer(op, chunk), x))  # [B * n, heads, L, L]
        for layer in self.encoders:
            x = layer(op, x, bias)
        return x, length

    def _streaming(self, op, length):
        """[L, L]: key within the query's chunk or the ``left_chunk`` before (None: all)."""
        size, left = int(self.a["chunk_size"]), int(self.a["left_chunk"])
        if size <= 0:
            return None
        pos = op.Range(_i64(op, 0), length, _i64(op, 1))
        chunk = op.Div(pos, _i64(op, size))
        start = op.Mul(op.Max(op.Sub(chunk, _i64(op, left)), _i64(op, 0)), _i64(op, size))
        end = op.Mul(op.Add(chunk, _i64(op, 1)), _i64(op, size))
        keys = op.Unsqueeze(pos, _ints(op, 0))
        return op.And(op.GreaterOrEqual(keys, op.Unsqueeze(start, _ints(op, 1))),
                      op.Less(keys, op.Unsqueeze(end, _ints(op, 1))))


class Phi4AudioEmbedding(nn.Module):
    """``audio_embed``: encoder + the speech / vision-speech projections -> audio_features."""

    def __init__(self, a, text_hidden: int):
        super().__init__()
        check_audio_config(a)
        self.encoder = _Encoder(a)
        hidden = a["hidden_size"]
        self.up_proj_for_speech = Linear(hidden, text_hidden, True)
        self.down_proj_for_speech = Linear(text_hidden, text_hidden, True)
        self.up_proj_for_vision_speech = Linear(hidden, text_hidden, True)
        self.down_proj_for_vision_speech = Linear(text_hidden, text_hidden, True)
        self.text_hidden, self.a = text_hidden, a

    def genai_feature_extraction(self) -> dict:
        """onnxruntime-extensions' Phi-4 audio steps (genai's speech processor): decode
        (8 / 16 kHz), STFT + log-mel (``input_size`` bins), token counts at the
        encoder's time reduction."""
        mel, rate = self.a["input_size"], self.a["time_reduction"]
        attrs = {"audio_compression_rate": rate}
        for prefix, fft, frame, hop in (("", 512, 400, 160), ("_8k", 256, 200, 80)):
            attrs.update({f"stft_normal{prefix}/n_fft": fft,
                          f"stft_normal{prefix}/frame_length": frame,
                          f"stft_normal{prefix}/hop_length": hop,
                          f"stft_normal{prefix}/win_fn": "hamming",
                          f"logmel{prefix}/chunk_size": 30, f"logmel{prefix}/hop_length": hop,
                          f"logmel{prefix}/n_fft": 512, f"logmel{prefix}/n_mel": mel,
                          f"logmel{prefix}/feature_first": 0, f"logmel{prefix}/no_padding": 1})
        steps = [{"operation": {"name": "audio_decoder", "type": "AudioDecoderEx",
                                "attrs": {"target_sample_rates": [8000, 16000]}}},
                 {"operation": {"name": "phi_4_audio_embed", "type": "Phi4AudioEmbed",
                                "attrs": attrs}}]
        return {"feature_extraction": {"sequence": steps,
                                       "output_aligner": "phi4-audio-aligner"}}

    def forward(self, op, audio_embeds, audio_attention_mask, audio_sizes, mode):
        x, length = self.encoder(op, audio_embeds, audio_attention_mask)
        batch = op.Shape(audio_embeds, start=0, end=1)
        x = op.Reshape(x, op.Concat(batch, _ints(op, -1, self.encoder.a["hidden_size"]), axis=0))
        x = op.Slice(x, _ints(op, 0), op.Unsqueeze(length, _ints(op, 0)), _ints(op, 1))
        speech = self.down_proj_for_speech(op, op.Gelu(self.up_proj_for_speech(op, x)))
        both = self.down_proj_for_vision_speech(
            op, op.Gelu(self.up_proj_for_vision_speech(op, x)))
        with_image = op.Equal(op.Mod(op.Reshape(mode, _ints(op, -1)), _i64(op, 2)), _i64(op, 1))
        out = op.Where(op.Reshape(with_image, _ints(op, 1, 1, 1)), both, speech)
        rows = op.Reshape(out, _ints(op, -1, self.text_hidden))  # [B * S, text hidden]
        return op.Gather(rows, _token_rows(op, audio_sizes, length), axis=0)


def _token_rows(op, sizes, length):
    """Row of [B * S] each output token reads: audio i's first sizes[i] positions."""
    ends = op.CumSum(sizes, _i64(op, 0))
    token = op.Range(_i64(op, 0), op.ReduceSum(sizes, keepdims=0), _i64(op, 1))
    audio = op.ReduceSum(op.Cast(op.GreaterOrEqual(op.Unsqueeze(token, _ints(op, 1)),
                                                   op.Unsqueeze(ends, _ints(op, 0))), to=I64),
                         _ints(op, 1), keepdims=0)
    local = op.Sub(token, op.Sub(op.Gather(ends, audio), op.Gather(sizes, audio)))
    return op.Add(op.Mul(audio, length), local)


def check_audio_config(a) -> None:
    """Switches transformers' forward would not run, refused up front."""
    if a["downsample_rate"] != 1:
        raise ConfigError(f"phi4_multimodal: audio_config downsample_rate "
                          f"{a['downsample_rate']} is not supported (transformers' forward "
                          f"does not downsample; supported: 1)")
    if a["time_reduction"] < 2 or a["time_reduction"] & (a["time_reduction"] - 1):
        raise ConfigError(f"phi4_multimodal: audio_config time_reduction "
                          f"{a['time_reduction']} must be a power of 2")
    for key in ("ext_pw_out_channel", "depthwise_separable_out_channel"):
        if a[key] != a["hidden_size"]:
            raise ConfigError(f"phi4_multimodal: audio_config {key} ({a[key]}) must equal "
                              f"hidden_size ({a['hidden_size']}): the conv module adds it "
                              f"to the residual")
