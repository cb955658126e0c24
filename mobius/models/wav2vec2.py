"""wav2vec 2.0 and HuBERT with a CTC head (``Wav2Vec2ForCTC``, ``HubertForCTC``; task
mobius/tasks/ctc.py): raw 16 kHz waveform -> per-frame logits over the CTC vocabulary.

* Feature encoder: ``len(conv_dim)`` strided Conv1d layers (bias: ``conv_bias``)
  over the waveform, each followed by ``feat_extract_activation``.
  ``feat_extract_norm`` "group": the first layer has a GroupNorm with one group
  per channel (normalized over the whole, padded, waveform), the others none;
  "layer": every layer has a LayerNorm over its channels at each frame.
* Feature projection: LayerNorm (HuBERT: only with ``feat_proj_layer_norm``) and
  a Linear to ``hidden_size``.
* Encoder: padded frames zeroed; + the positional convolution (grouped Conv1d,
  kernel ``num_conv_pos_embeddings``, "same" padding, one output dropped for an
  even kernel; its weight is weight-normalized along the kernel axis and
  computed at build time from either spelling: mobius/components/conv.py;
  HuBERT's ``conv_pos_batch_norm``: a BatchNorm before a plain conv instead);
  ``do_stable_layer_norm`` false: LayerNorm, then post-norm layers (LN(x +
  attn(x)), LN(x + ff(x)), the BERT pattern SkipLayerNorm fuses); true: pre-norm
  layers (x + attn(LN(x)), x + ff(LN(x))), then LayerNorm.
* ``lm_head``: Linear to ``vocab_size`` (id 0, ``<pad>``, is the CTC blank).

The attention mask: transformers' processors return one for layer-norm feature
encoders only (``return_attention_mask``), so the graph takes ``attention_mask``
[batch, samples] exactly when ``feat_extract_norm`` is "layer". Frame t of a row
is real when t < that row's conv output length (the length formula of
transformers' ``_get_feat_extract_output_lengths``, on mask.sum()).

Not supported (ConfigError): adapters (``add_adapter``, ``adapter_attn_dim``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention_mask import padding_mask
from mobius.components.conv import Conv1d, weight_norm
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.bert import bidirectional_attention
from mobius.models.family import ModelFamily
from mobius.tasks import ctc
from mobius.weights.attach import IgnoredTensors

#: PyTorch's default epsilon: the conv layers' norms (config's layer_norm_eps is the encoder's)
CONV_NORM_EPS = 1e-5
MAX_CONV_LAYERS, MAX_KERNEL = 64, 1 << 16

#: transformers' Wav2Vec2Config / HubertConfig defaults, for keys a config.json leaves out
_DEFAULTS: Mapping[str, Any] = {
    "vocab_size": 32, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
    "intermediate_size": 3072, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
    "feat_extract_norm": "group", "feat_extract_activation": "gelu",
    "conv_dim": [512] * 7, "conv_stride": [5, 2, 2, 2, 2, 2, 2],
    "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_bias": False,
    "num_conv_pos_embeddings": 128, "num_conv_pos_embedding_groups": 16,
    "do_stable_layer_norm": False, "feat_proj_layer_norm": True, "conv_pos_batch_norm": False,
    "pad_token_id": 0,
}


def normalize_raw(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {**_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {"rms_norm_eps": float(raw["layer_norm_eps"]), "hidden_act": raw["hidden_act"]}


def _ints(speech: SpeechEncoderConfig, key: str, limit: int) -> None:
    value = getattr(speech, key)
    if not 0 < len(value) <= MAX_CONV_LAYERS or any(not 0 < v <= limit for v in value):
        raise ConfigError(f"config.json: {key!r} must be a list of 1..{MAX_CONV_LAYERS} "
                          f"integers in 1..{limit}, got {list(value)!r}")


@dataclasses.dataclass(frozen=True)
class SpeechEncoderConfig:
    """The feature encoder and positional convolution switches of config.json: the
    families' options (normalize_raw fills transformers' defaults), checked by
    :meth:`from_config`."""

    conv_dim: tuple[int, ...]
    conv_stride: tuple[int, ...]
    conv_kernel: tuple[int, ...]
    conv_bias: bool
    feat_extract_norm: str
    feat_extract_activation: str
    feat_proj_layer_norm: bool
    num_conv_pos_embeddings: int
    num_conv_pos_embedding_groups: int
    do_stable_layer_norm: bool
    conv_pos_batch_norm: bool
    add_adapter: bool = False  #: refused
    adapter_attn_dim: int | None = None  #: language adapters: refused

    @staticmethod
    def from_config(config: ArchitectureConfig) -> "SpeechEncoderConfig":
        """``config.options``, checked."""
        speech = config.options
        if speech.add_adapter:
            raise ConfigError("config.json: 'add_adapter' is not supported")
        if speech.adapter_attn_dim is not None:
            raise ConfigError("config.json: 'adapter_attn_dim' (language adapters) is not "
                              "supported")
        _ints(speech, "conv_dim", 1 << 16)
        _ints(speech, "conv_stride", MAX_KERNEL)
        _ints(speech, "conv_kernel", MAX_KERNEL)
        if not len(speech.conv_dim) == len(speech.conv_stride) == len(speech.conv_kernel):
            raise ConfigError("config.json: conv_dim, conv_stride and conv_kernel differ in length")
        if speech.feat_extract_norm not in ("group", "layer"):
            raise ConfigError(f"config.json: 'feat_extract_norm' must be \"group\" or \"layer\", "
                              f"got {speech.feat_extract_norm!r}")
        _positive(speech, "num_conv_pos_embeddings")
        groups = _positive(speech, "num_conv_pos_embedding_groups")
        if config.hidden_size % groups:
            raise ConfigError(f"config.json: hidden_size ({config.hidden_size}) is not divisible "
                              f"by num_conv_pos_embedding_groups ({groups})")
        return speech


def _positive(speech: SpeechEncoderConfig, key: str) -> int:
    value = getattr(speech, key)
    if not 0 < value <= MAX_KERNEL:
        raise ConfigError(f"config.json: {key!r} must be an integer in 1..{MAX_KERNEL}, "
                          f"got {value!r}")
    return value


class ChannelGroupNorm(nn.Module):
    """GroupNorm with one group per channel over x [batch, channels, length]: the ONNX
    InstanceNormalization op, in the build dtype (onnxruntime's float16 kernel sums
    in float32: 1.7e-3 off over 50k frames of mean 100, std 3)."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight = Weight([channels])
        self.bias = Weight([channels])

    def forward(self, op, x):
        return op.InstanceNormalization(x, self.weight, self.bias, epsilon=CONV_NORM_EPS)


class FeatureEncoderLayer(nn.Module):
    """conv -> norm ("group": ChannelGroupNorm, "layer": LayerNorm per frame, None) -> act."""

    def __init__(self, speech: SpeechEncoderConfig, index: int, norm: str | None):
        super().__init__()
        in_channels = speech.conv_dim[index - 1] if index else 1
        out_channels = speech.conv_dim[index]
        self.norm, self.activation = norm, speech.feat_extract_activation
        self.conv = Conv1d(in_channels, out_channels, speech.conv_kernel[index],
                           stride=speech.conv_stride[index], bias=speech.conv_bias)
        self.layer_norm = (ChannelGroupNorm(out_channels) if norm == "group"
                           else LayerNorm(out_channels, CONV_NORM_EPS) if norm == "layer" else None)

    def forward(self, op, x):
        x = self.conv(op, x)
        if self.norm == "group":
            x = self.layer_norm(op, x)
        elif self.norm == "layer":
            x = op.Transpose(self.layer_norm(op, op.Transpose(x, perm=[0, 2, 1])), perm=[0, 2, 1])
        return apply_activation(op, x, self.activation)


class FeatureEncoder(nn.Module):
    """waveform [batch, samples] -> features [batch, frames, conv_dim[-1]]."""

    def __init__(self, speech: SpeechEncoderConfig):
        super().__init__()
        group = speech.feat_extract_norm == "group"
        self.conv_layers = nn.ModuleList([
            FeatureEncoderLayer(speech, i, ("group" if i == 0 else None) if group else "layer")
            for i in range(len(speech.conv_dim))])

    def forward(self, op, input_values):
        x = op.Unsqueeze(input_values, op.Constant(value_ints=[1]))
        for layer in self.conv_layers:
            x = layer(op, x)
        features = op.Transpose(x, perm=[0, 2, 1])
        # Name the frame axis (shape inference leaves a strided conv's length anonymous),
        # so the residual Add -> LayerNorm pairs downstream have the equal named shapes
        # the SkipLayerNorm fusion checks.
        features.shape = ir.Shape([input_values.shape[0], ctc.FRAMES, x.shape[1]])
        return features


class FeatureProjection(nn.Module):
    def __init__(self, config: ArchitectureConfig, speech: SpeechEncoderConfig):
        super().__init__()
        channels = speech.conv_dim[-1]
        self.layer_norm = (LayerNorm(channels, config.rms_norm_eps)
                           if speech.feat_proj_layer_norm else None)
        self.projection = Linear(channels, config.hidden_size, True)

    def forward(self, op, x):
        if self.layer_norm is not None:
            x = self.layer_norm(op, x)
        return self.projection(op, x)


class BatchNorm1d(nn.Module):
    """Inference BatchNorm over x [batch, channels, length] (running statistics)."""

    def __init__(self, channels: int):
        super().__init__()
        self.weight, self.bias = Weight([channels]), Weight([channels])
        self.running_mean, self.running_var = Weight([channels]), Weight([channels])

    def forward(self, op, x):
        return op.BatchNormalization(x, self.weight, self.bias, self.running_mean,
                                     self.running_var, epsilon=CONV_NORM_EPS)


class PositionalConvEmbedding(nn.Module):
    """act(grouped weight-normalized conv(hidden)) over [batch, frames, hidden], same length;
    with ``conv_pos_batch_norm``, act(conv(batch_norm(hidden))) with a plain conv weight."""

    def __init__(self, config: ArchitectureConfig, speech: SpeechEncoderConfig):
        super().__init__()
        hidden, kernel = config.hidden_size, speech.num_conv_pos_embeddings
        groups = speech.num_conv_pos_embedding_groups
        pad = kernel // 2  # transformers pads both ends, drops an even kernel's last output
        self.activation = speech.feat_extract_activation
        self.batch_norm = BatchNorm1d(hidden) if speech.conv_pos_batch_norm else None
        self.conv = Conv1d(hidden, hidden, kernel, padding=(pad, pad - 1 + kernel % 2),
                           groups=groups)
        if self.batch_norm is None:
            self.conv.weight = weight_norm([hidden, hidden // groups, kernel], dim=2)

    def forward(self, op, hidden):
        x = op.Transpose(hidden, perm=[0, 2, 1])
        if self.batch_norm is not None:
            x = self.batch_norm(op, x)
        x = self.conv(op, x)
        out = op.Transpose(apply_activation(op, x, self.activation), perm=[0, 2, 1])
        out.shape = hidden.shape  # "same" padding: the frame count is kept
        return out


class Attention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.q_proj = Linear(hidden, hidden, True)
        self.k_proj = Linear(hidden, hidden, True)
        self.v_proj = Linear(hidden, hidden, True)
        self.out_proj = Linear(hidden, hidden, True)

    def forward(self, op, hidden, mask):
        attn = bidirectional_attention(op, (self.q_proj, self.k_proj, self.v_proj), hidden, mask,
                                       self.num_heads, self.head_dim)
        return self.out_proj(op, attn)


class FeedForward(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.activation = config.hidden_act
        self.intermediate_dense = Linear(config.hidden_size, config.intermediate_size, True)
        self.output_dense = Linear(config.intermediate_size, config.hidden_size, True)

    def forward(self, op, x):
        return self.output_dense(op, apply_activation(op, self.intermediate_dense(op, x),
                                                      self.activation))


class EncoderLayer(nn.Module):
    """Post-norm (LN(x + attn(x)), LN(x + ff(x))) or, ``stable``, pre-norm."""

    def __init__(self, config: ArchitectureConfig, stable: bool):
        super().__init__()
        self.stable = stable
        self.attention = Attention(config)
        self.layer_norm = LayerNorm(config.hidden_size, config.rms_norm_eps)
        self.feed_forward = FeedForward(config)
        self.final_layer_norm = LayerNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, hidden, mask):
        if self.stable:
            hidden = op.Add(hidden, self.attention(op, self.layer_norm(op, hidden), mask))
            return op.Add(hidden, self.feed_forward(op, self.final_layer_norm(op, hidden)))
        hidden = self.layer_norm(op, op.Add(hidden, self.attention(op, hidden, mask)))
        return self.final_layer_norm(op, op.Add(hidden, self.feed_forward(op, hidden)))


class Encoder(nn.Module):
    def __init__(self, config: ArchitectureConfig, speech: SpeechEncoderConfig):
        super().__init__()
        self.stable = speech.do_stable_layer_norm
        self.pos_conv_embed = PositionalConvEmbedding(config, speech)
        self.layer_norm = LayerNorm(config.hidden_size, config.rms_norm_eps)
        self.layers = nn.ModuleList([EncoderLayer(config, self.stable)
                                     for _ in range(config.num_hidden_layers)])

    def forward(self, op, hidden, frames=None):
        """``frames``: bool [batch, frames], true at real frames (None: no padding)."""
        mask = None
        if frames is not None:
            zeroed = op.Where(op.Unsqueeze(frames, op.Constant(value_ints=[2])), hidden,
                              op.CastLike(op.Constant(value_float=0.0), hidden))
            zeroed.shape, hidden = hidden.shape, zeroed  # the mask's frame axis is anonymous
            mask = padding_mask(op, op.Cast(frames, to=ir.DataType.INT64), get_build_dtype())
        hidden = op.Add(hidden, self.pos_conv_embed(op, hidden))
        if not self.stable:
            hidden = self.layer_norm(op, hidden)
        for layer in self.layers:
            hidden = layer(op, hidden, mask)
        return self.layer_norm(op, hidden) if self.stable else hidden


def real_frames(op, attention_mask, features, speech: SpeechEncoderConfig):
    """bool [batch, frames]: frame t is real when t < the row's conv output length,
    floor((length - kernel) / stride) + 1 per conv layer, on length = mask.sum()."""
    lengths = op.ReduceSum(attention_mask, op.Constant(value_ints=[1]), keepdims=0)
    for kernel, stride in zip(speech.conv_kernel, speech.conv_stride):
        lengths = op.Add(op.Div(op.Sub(lengths, op.Constant(value_int=kernel)),
                                op.Constant(value_int=stride)), op.Constant(value_int=1))
    count = op.Squeeze(op.Shape(features, start=1, end=2), op.Constant(value_ints=[0]))
    positions = op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1))
    return op.Less(op.Unsqueeze(positions, op.Constant(value_ints=[0])),
                   op.Unsqueeze(lengths, op.Constant(value_ints=[1])))


class SpeechModel(nn.Module):
    """Wav2Vec2Model / HubertModel: waveform (+ attention_mask) -> last_hidden_state."""

    def __init__(self, config: ArchitectureConfig, speech: SpeechEncoderConfig):
        super().__init__()
        self.speech = speech
        self.feature_extractor = FeatureEncoder(speech)
        self.feature_projection = FeatureProjection(config, speech)
        self.encoder = Encoder(config, speech)

    def forward(self, op, input_values, attention_mask=None):
        features = self.feature_extractor(op, input_values)
        frames = (None if attention_mask is None
                  else real_frames(op, attention_mask, features, self.speech))
        return self.encoder(op, self.feature_projection(op, features), frames)


def audio_inputs(speech: SpeechEncoderConfig) -> tuple[str, ...]:
    """The graph's inputs: attention_mask for layer-norm feature encoders only."""
    return ("input_values", "attention_mask") if speech.feat_extract_norm == "layer" else (
        "input_values",)


class Wav2Vec2ForCTC(nn.Module):
    """The CTC module protocol of mobius/tasks/ctc.py: ``audio_inputs`` and
    forward(op, *audio_inputs) -> logits [batch, frames, vocab]."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        speech = SpeechEncoderConfig.from_config(config)
        self.audio_inputs = audio_inputs(speech)
        self.wav2vec2 = SpeechModel(config, speech)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, True)

    def forward(self, op, *inputs):
        return self.lm_head(op, self.wav2vec2(op, *inputs))


class HubertForCTC(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        speech = SpeechEncoderConfig.from_config(config)
        self.audio_inputs = audio_inputs(speech)
        self.hubert = SpeechModel(config, speech)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, True)

    def forward(self, op, *inputs):
        return self.lm_head(op, self.hubert(op, *inputs))


def _ignored(prefix: str):
    def ignored(config):
        return (IgnoredTensors(rf"{prefix}\.masked_spec_embed",
                               "SpecAugment's training-time mask vector"),
                IgnoredTensors(
                    rf"{prefix}\.encoder\.pos_conv_embed\.batch_norm\.num_batches_tracked",
                    "BatchNorm's training step counter"))
    return ignored


FAMILY = ModelFamily(
    name="wav2vec2", cohorts=("every-dtype",), model_types=(), architectures=("Wav2Vec2ForCTC",),
    module=Wav2Vec2ForCTC, task=ctc.TASK, tiny_preset="tiny-wav2vec2",
    # transformers' Wav2Vec2 always has the projection norm, never the positional BatchNorm
    normalize_raw=lambda raw: {**normalize_raw(raw), "feat_proj_layer_norm": True,
                               "conv_pos_batch_norm": False},
    config_overrides=_overrides, options=SpeechEncoderConfig,
    ignored_tensors=_ignored("wav2vec2"),
)

HUBERT = ModelFamily(
    name="hubert", model_types=(), architectures=("HubertForCTC",),
    module=HubertForCTC, task=ctc.TASK, tiny_preset="tiny-hubert",
    normalize_raw=normalize_raw, config_overrides=_overrides, options=SpeechEncoderConfig,
    ignored_tensors=_ignored("hubert"),
)

#: what the registry reads from this module, in lookup order
FAMILIES = (FAMILY, HUBERT)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # CTC speech recognition on raw waveforms: 3 convs (strides 5, 2, 2: 20 samples a frame),
    # a 37-token character vocabulary, an even positional-conv kernel (6, groups 4).
    # wav2vec2: group-norm feature encoder, post-norm layers, bias-less convs (wav2vec2-base);
    # hubert: layer-norm feature encoder (takes attention_mask), pre-norm layers, conv biases.
    "tiny-wav2vec2": {
        "model_type": "wav2vec2", "architectures": ["Wav2Vec2ForCTC"], "vocab_size": 37,
        "hidden_size": 64, "intermediate_size": 88, "num_hidden_layers": 2,
        "num_attention_heads": 4, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
        "conv_dim": [24, 24, 40], "conv_stride": [5, 2, 2], "conv_kernel": [10, 3, 3],
        "conv_bias": False, "feat_extract_norm": "group", "feat_extract_activation": "gelu",
        "num_conv_pos_embeddings": 6, "num_conv_pos_embedding_groups": 4,
        "do_stable_layer_norm": False, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    },
    "tiny-hubert": {
        "model_type": "hubert", "architectures": ["HubertForCTC"], "vocab_size": 37,
        "hidden_size": 64, "intermediate_size": 88, "num_hidden_layers": 2,
        "num_attention_heads": 4, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
        "conv_dim": [24, 24, 40], "conv_stride": [5, 2, 2], "conv_kernel": [10, 3, 3],
        "conv_bias": True, "feat_extract_norm": "layer", "feat_extract_activation": "gelu",
        "num_conv_pos_embeddings": 6, "num_conv_pos_embedding_groups": 4,
        "do_stable_layer_norm": True, "feat_proj_layer_norm": True, "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2,
    },
}
