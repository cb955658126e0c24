"""Whisper (speech recognition, encoder-decoder), built as two models for
onnxruntime-genai's whisper pipeline (task ``automatic-speech-recognition``,
mobius/tasks/speech_seq2seq.py):

* ``encoder`` (optimizer role encoder): log-mel ``audio_features`` [batch,
  num_mel_bins, 2 * max_source_positions] -> conv1 (k3, pad 1) + GELU -> conv2
  (k3, stride 2, pad 1) + GELU -> + the checkpoint's position table
  (``encoder.embed_positions.weight``: sinusoids in OpenAI's checkpoints, but
  read from the checkpoint, never recomputed) -> pre-norm layers (x +
  attn(LN(x)), x + fc2(gelu(fc1(LN(x))))) -> final LayerNorm =
  ``encoder_hidden_states``; plus, for every **decoder** layer, the
  cross-attention key and value ``present_key_cross_{i}`` /
  ``present_value_cross_{i}`` [batch, decoder heads, encoder length, head_dim].
* ``decoder`` (optimizer role decoder): ``input_ids`` + the self-attention
  cache ``past_key_self_{i}`` / ``past_value_self_{i}`` + the cross cache
  ``past_key_cross_{i}`` / ``past_value_cross_{i}`` -> ``logits`` and
  ``present_key_self_{i}`` / ``present_value_self_{i}``.

Where the cross-attention K/V projection lives. It is computed **in the
encoder**, following onnxruntime-genai's convention (its model builder's
WhisperEncoder.make_postprocessing_nodes, and its WhisperState, which binds the
encoder's ``cross_present_*`` outputs once and feeds the same buffers to every
decoder run as ``cross_past_*``): the K/V of the encoder states depend on the
audio only, so they are projected once per utterance instead of at every
decoding step. The weights are the decoder's own
(``model.decoder.layers.{i}.encoder_attn.k_proj`` / ``v_proj``), so the encoder
model holds those 2 x decoder_layers projections and the decoder model holds
only the cross-attention's query and output projections.

The decoder has no ``attention_mask`` or ``position_ids`` input (genai 0.18's
whisper decoder is fed neither): positions are ``past + 0 .. seq - 1``, with
``past`` read from ``past_key_self_0``'s length, and self-attention is causal
over the cache. Without an attention mask, GroupQueryAttention (which takes its
sequence lengths from one) does not apply; attention stays the standard op.

Math as transformers' WhisperForConditionalGeneration: q/v/out projections
have biases, k projections do not; queries are scaled by head_dim^-0.5 (the
Attention op's ``scale`` rather than a Mul, the same product); LayerNorms use
PyTorch's default epsilon 1e-5; ``scale_embedding`` is ignored, as transformers
ignores it (it computes ``embed_scale`` and never applies it); the LM head
``proj_out`` is tied to ``model.decoder.embed_tokens`` unless
``tie_word_embeddings`` is false. Module names mirror the hub checkpoints
(``model.encoder.*``, ``model.decoder.*``, ``proj_out``); checkpoints of the
bare ``WhisperModel`` (no ``model.`` prefix) load through ``checkpoint_aliases``.

config.json: the decoder's fields (d_model, decoder_layers,
decoder_attention_heads, decoder_ffn_dim, max_target_positions) become the
ArchitectureConfig of the family; the encoder's are read into ``config.options``
(:class:`WhisperOptions`) and checked by :class:`WhisperEncoderConfig`. Keys a
config.json leaves out get WhisperConfig's defaults (whisper-tiny's dimensions).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention_mask import causal_padding_mask
from mobius.components.conv import Conv1d
from mobius.components.cross_attention import ProjectedAttention
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.lm_head import LMHead
from mobius.components.scope import module_scope
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.tasks import speech_seq2seq
from mobius.tiny.bases import VOCAB_SIZE

#: PyTorch nn.LayerNorm's default epsilon (Whisper never overrides it).
LAYER_NORM_EPS = 1e-5

#: transformers' WhisperConfig defaults, for keys a config.json leaves out.
_WHISPER_DEFAULTS: Mapping[str, Any] = {
    "vocab_size": 51865, "num_mel_bins": 80, "encoder_layers": 4, "encoder_attention_heads": 6,
    "decoder_layers": 4, "decoder_attention_heads": 6, "decoder_ffn_dim": 1536,
    "encoder_ffn_dim": 1536, "activation_function": "gelu", "d_model": 384,
    "max_source_positions": 1500, "max_target_positions": 448, "pad_token_id": 50256,
    "bos_token_id": 50256, "eos_token_id": 50256, "decoder_start_token_id": 50257,
    "tie_word_embeddings": True,
}


def normalize_whisper(raw: Mapping[str, Any]) -> dict[str, Any]:
    """WhisperConfig's defaults filled in; the decoder's fields under the standard names.

    The standard names are always overwritten: WhisperConfig aliases
    ``num_hidden_layers`` / ``num_attention_heads`` to the *encoder's* values, and a
    config.json may spell them.
    """
    out = {**_WHISPER_DEFAULTS, **raw}
    out.pop("head_dim", None)
    out.update(
        hidden_size=out["d_model"],
        num_hidden_layers=out["decoder_layers"],
        num_attention_heads=out["decoder_attention_heads"],
        num_key_value_heads=out["decoder_attention_heads"],
        intermediate_size=out["decoder_ffn_dim"],
        max_position_embeddings=out["max_target_positions"],
        hidden_act=out["activation_function"],
    )
    return out


@dataclasses.dataclass(frozen=True)
class WhisperOptions:
    """The encoder's config.json keys (the decoder's make the ArchitectureConfig)."""

    num_mel_bins: int = _WHISPER_DEFAULTS["num_mel_bins"]
    d_model: int = _WHISPER_DEFAULTS["d_model"]
    encoder_layers: int = _WHISPER_DEFAULTS["encoder_layers"]
    encoder_attention_heads: int = _WHISPER_DEFAULTS["encoder_attention_heads"]
    encoder_ffn_dim: int = _WHISPER_DEFAULTS["encoder_ffn_dim"]
    max_source_positions: int = _WHISPER_DEFAULTS["max_source_positions"]
    activation_function: str = _WHISPER_DEFAULTS["activation_function"]


@dataclasses.dataclass(frozen=True)
class WhisperEncoderConfig:
    num_mel_bins: int
    hidden_size: int
    num_layers: int
    num_heads: int
    ffn_dim: int
    max_source_positions: int
    activation: str

    @classmethod
    def from_options(cls, options: WhisperOptions) -> "WhisperEncoderConfig":
        values = {}
        for field, key in (("num_mel_bins", "num_mel_bins"), ("hidden_size", "d_model"),
                           ("num_layers", "encoder_layers"), ("num_heads", "encoder_attention_heads"),
                           ("ffn_dim", "encoder_ffn_dim"),
                           ("max_source_positions", "max_source_positions")):
            value = getattr(options, key)
            if value <= 0:
                raise ConfigError(f"config.json: {key!r} must be a positive integer, got {value!r}")
            values[field] = value
        if values["hidden_size"] % values["num_heads"]:
            raise ConfigError(f"config.json: d_model ({values['hidden_size']}) is not divisible by "
                              f"encoder_attention_heads ({values['num_heads']})")
        return cls(activation=options.activation_function, **values)

    @property
    def num_frames(self) -> int:
        """The mel frames the encoder takes: conv2's stride 2 halves them to the positions."""
        return 2 * self.max_source_positions


def _clamp_f16(op, hidden):
    """transformers clamps float16 encoder states to +-(max - 1000) after each layer."""
    if get_build_dtype() != ir.DataType.FLOAT16:
        return hidden
    limit = float(np.finfo(np.float16).max) - 1000
    return op.Clip(hidden, op.Constant(value=ir.tensor(np.array(-limit, np.float16))),
                   op.Constant(value=ir.tensor(np.array(limit, np.float16))))


class WhisperEncoderLayer(nn.Module):
    def __init__(self, config: WhisperEncoderConfig):
        super().__init__()
        hidden = config.hidden_size
        self.activation = config.activation
        self.self_attn = ProjectedAttention(hidden, config.num_heads, key_bias=False)
        self.self_attn_layer_norm = LayerNorm(hidden, LAYER_NORM_EPS)
        self.fc1 = Linear(hidden, config.ffn_dim, True)
        self.fc2 = Linear(config.ffn_dim, hidden, True)
        self.final_layer_norm = LayerNorm(hidden, LAYER_NORM_EPS)

    def forward(self, op, hidden):
        attn, _, _ = self.self_attn(op, self.self_attn_layer_norm(op, hidden))
        hidden = op.Add(hidden, attn)
        mlp = apply_activation(op, self.fc1(op, self.final_layer_norm(op, hidden)), self.activation)
        return _clamp_f16(op, op.Add(hidden, self.fc2(op, mlp)))


class PositionTable(nn.Module):
    """A learned position table added whole (the encoder's length is fixed)."""

    def __init__(self, num_positions: int, hidden_size: int):
        super().__init__()
        self.weight = Weight([num_positions, hidden_size])

    def forward(self, op):
        return self.weight


class WhisperEncoder(nn.Module):
    def __init__(self, config: WhisperEncoderConfig):
        super().__init__()
        hidden = config.hidden_size
        self.conv1 = Conv1d(config.num_mel_bins, hidden, 3, padding=1)
        self.conv2 = Conv1d(hidden, hidden, 3, stride=2, padding=1)
        self.embed_positions = PositionTable(config.max_source_positions, hidden)
        self.layers = nn.ModuleList([WhisperEncoderLayer(config) for _ in range(config.num_layers)])
        self.layer_norm = LayerNorm(hidden, LAYER_NORM_EPS)

    def forward(self, op, audio_features):
        """[batch, mels, 2 * positions] -> [batch, positions, hidden]."""
        x = op.Gelu(self.conv1(op, audio_features))
        x = op.Gelu(self.conv2(op, x))
        hidden = op.Add(op.Transpose(x, perm=[0, 2, 1]), self.embed_positions(op))
        for layer in self.layers:
            hidden = layer(op, hidden)
        return self.layer_norm(op, hidden)


class WhisperDecoderLayer(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.activation = config.hidden_act
        self.self_attn = ProjectedAttention(hidden, config.num_attention_heads,
                                            key_bias=False)
        self.self_attn_layer_norm = LayerNorm(hidden, eps)
        self.encoder_attn = ProjectedAttention(hidden, config.num_attention_heads,
                                            key_bias=False)
        self.encoder_attn_layer_norm = LayerNorm(hidden, eps)
        self.fc1 = Linear(hidden, config.intermediate_size, True)
        self.fc2 = Linear(config.intermediate_size, hidden, True)
        self.final_layer_norm = LayerNorm(hidden, eps)

    def forward(self, op, hidden, mask, past_key, past_value, cross_key, cross_value):
        attn, present_key, present_value = self.self_attn(
            op, self.self_attn_layer_norm(op, hidden), mask, past_key, past_value)
        hidden = op.Add(hidden, attn)
        cross, _, _ = self.encoder_attn(op, self.encoder_attn_layer_norm(op, hidden),
                                        key=cross_key, value=cross_value)
        hidden = op.Add(hidden, cross)
        mlp = apply_activation(op, self.fc1(op, self.final_layer_norm(op, hidden)), self.activation)
        return op.Add(hidden, self.fc2(op, mlp)), present_key, present_value


class WhisperDecoder(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden = config.hidden_size
        self.embed_tokens = Embedding(config.vocab_size, hidden)
        self.embed_positions = Embedding(config.max_position_embeddings, hidden)
        self.layers = nn.ModuleList(
            [WhisperDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.layer_norm = LayerNorm(hidden, config.rms_norm_eps)

    def forward(self, op, input_ids, past, cross):
        """``past``: per layer (key, value) self cache [batch, heads, past, dim];
        ``cross``: per layer (key, value) [batch, heads, encoder length, dim]."""
        past_len = op.Shape(past[0][0], start=2, end=3)  # [1]
        total_len = op.Add(past_len, op.Shape(input_ids, start=1, end=2))
        # positions past .. past + seq - 1 as a running count over input_ids, so that
        # shape inference keeps [batch_size, sequence_length] (the Skip*Norm fusions check it)
        ones = op.Add(op.Mul(input_ids, op.Constant(value_int=0)), op.Constant(value_int=1))
        positions = op.Add(op.Sub(op.CumSum(ones, op.Constant(value_int=1)),
                                  op.Constant(value_int=1)), past_len)  # [batch, seq]
        hidden = op.Add(self.embed_tokens(op, input_ids), self.embed_positions(op, positions))
        # No padding in whisper's decoder batches: a mask of ones over the cache
        # leaves the causal part of the shared mask component.
        ones = op.ConstantOfShape(op.Concat(op.Shape(input_ids, start=0, end=1), total_len, axis=0),
                                  value=ir.tensor(np.array([1], dtype=np.int64)))
        mask = causal_padding_mask(op, input_ids, ones, get_build_dtype())
        presents = []
        for layer, (past_key, past_value), (key, value) in zip(self.layers, past, cross):
            hidden, present_key, present_value = layer(op, hidden, mask, past_key, past_value,
                                                       key, value)
            presents.append((present_key, present_value))
        return self.layer_norm(op, hidden), presents


class WhisperModel(nn.Module):
    """The ``model.`` container of the checkpoint: ``encoder`` and ``decoder``."""

    def __init__(self, config: ArchitectureConfig, encoder: WhisperEncoderConfig):
        super().__init__()
        self.encoder = WhisperEncoder(encoder)
        self.decoder = WhisperDecoder(config)


class WhisperForConditionalGeneration(nn.Module):
    """The speech seq2seq module protocol of mobius/tasks/speech_seq2seq.py:
    ``audio_input_shape``, ``encoder_length``, ``encode`` and ``decode``."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        encoder = WhisperEncoderConfig.from_options(config.options)
        if encoder.hidden_size != config.hidden_size:
            raise ConfigError("whisper: the encoder and decoder must share d_model")
        self.encoder_config = encoder
        self.audio_input_shape = (encoder.num_mel_bins, encoder.num_frames)
        self.encoder_length = encoder.max_source_positions
        self.model = WhisperModel(config, encoder)
        tied = self.model.decoder.embed_tokens if config.tie_word_embeddings else None
        self.proj_out = LMHead(config.hidden_size, config.vocab_size, tied=tied)

    def encode(self, op, audio_features):
        """-> encoder_hidden_states (cross_key_values projects them per decoder layer)."""
        with module_scope(op, self.model.name):
            hidden = self.model.encoder(op, audio_features)
        return hidden

    def cross_key_values(self, op, hidden):
        """-> [(cross key, cross value) per decoder layer] of the encoder's states."""
        decoder, cross = self.model.decoder, []
        with module_scope(op, self.model.name):
            for layer in decoder.layers:
                with module_scope(op, decoder.name, layer.name, layer.encoder_attn.name):
                    cross.append(layer.encoder_attn.project_key_value(op, hidden))
        return cross

    def decode(self, op, input_ids, past, cross):
        """-> (logits, [(present key, present value) per decoder layer])."""
        with module_scope(op, self.model.name):
            hidden, presents = self.model.decoder(op, input_ids, past, cross)
        return self.proj_out(op, hidden), presents


FAMILY = ModelFamily(
    name="whisper", cohorts=("every-dtype",),
    model_types=("whisper",),
    architectures=("WhisperForConditionalGeneration",),
    module=WhisperForConditionalGeneration,
    task=speech_seq2seq.TASK,
    tiny_preset="tiny-whisper",
    normalize_raw=normalize_whisper,
    config_overrides=lambda raw: {"rms_norm_eps": LAYER_NORM_EPS},
    options=WhisperOptions,
    checkpoint_aliases=(("model.", ("model.", "")),),  # WhisperModel saves without "model."
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Speech seq2seq: 20 mel bins x 60 frames -> 30 encoder positions (conv2 stride 2);
    # d_model 48, 4 heads of 12, encoder MLP 100, decoder MLP 88, 40 decoder positions.
    "tiny-whisper": {
        "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE, "num_mel_bins": 20, "d_model": 48,
        "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 100, "decoder_ffn_dim": 88,
        "max_source_positions": 30, "max_target_positions": 40, "activation_function": "gelu",
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "decoder_start_token_id": 3,
        "begin_suppress_tokens": None, "suppress_tokens": None, "tie_word_embeddings": True,
    },
}
