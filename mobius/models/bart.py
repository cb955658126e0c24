"""BART (text2text-generation, encoder-decoder), built as two models
(mobius/tasks/text2text.py): ``encoder`` (states + every decoder layer's cross K/V)
and ``decoder`` (self cache + cross cache -> logits).

Math as transformers' BartForConditionalGeneration:

* token embeddings times sqrt(d_model) when ``scale_embedding``. Each stack reads
  its ``embed_tokens``: ``model.shared`` in tied checkpoints (the usual layout, where
  only ``model.shared.weight`` is saved), the stack's own table where a checkpoint
  has one (transformers 5 unties them with ``tie_word_embeddings: false``);
* learned positions ``embed_positions`` [max_position_embeddings + 2, d_model]
  read at position + 2 (BART's offset): 0 .. len - 1 in the encoder (padding
  does not shift them), past .. past + seq - 1 in the decoder; then
  ``layernorm_embedding``;
* post-norm layers: x = LN(x + attn(x)), [x = LN(x + cross_attn(x))],
  x = LN(x + fc2(act(fc1(x)))); LayerNorm epsilon 1e-5 (PyTorch's default);
* attention (mobius/components/cross_attention.py) with biases on all four
  projections; queries scaled by head_dim**-0.5; encoder and decoder head counts may
  differ;
* the LM head: ``model.shared`` unless ``tie_word_embeddings`` is false
  (``lm_head.weight``), plus ``final_logits_bias`` [1, vocab].

transformers clamps float16 encoder states only when they overflow; the f16 graph
does not (the parity test states its tolerance).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention_mask import causal_padding_mask, padding_mask
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
from mobius.tasks import text2text
from mobius.weights.attach import IgnoredTensors
from mobius.weights.dtypes import numpy_dtype
from mobius.tiny.bases import VOCAB_SIZE

LAYER_NORM_EPS = 1e-5
POSITION_OFFSET = 2

#: transformers' BartConfig defaults (bart-large), for keys a config.json leaves out.
_BART_DEFAULTS: Mapping[str, Any] = {
    "vocab_size": 50265, "max_position_embeddings": 1024, "encoder_layers": 12,
    "encoder_ffn_dim": 4096, "encoder_attention_heads": 16, "decoder_layers": 12,
    "decoder_ffn_dim": 4096, "decoder_attention_heads": 16, "activation_function": "gelu",
    "d_model": 1024, "scale_embedding": False, "pad_token_id": 1, "bos_token_id": 0,
    "eos_token_id": 2, "decoder_start_token_id": 2, "tie_word_embeddings": True,
}


def normalize_bart(raw: Mapping[str, Any]) -> dict[str, Any]:
    """BartConfig's defaults filled in; the decoder's fields under the standard names
    (BartConfig aliases num_hidden_layers / num_attention_heads to the encoder's)."""
    out = {**_BART_DEFAULTS, **raw}
    out.pop("head_dim", None)
    out.update(
        hidden_size=out["d_model"], num_hidden_layers=out["decoder_layers"],
        num_attention_heads=out["decoder_attention_heads"],
        num_key_value_heads=out["decoder_attention_heads"],
        intermediate_size=out["decoder_ffn_dim"], hidden_act=out["activation_function"],
    )
    return out


@dataclasses.dataclass(frozen=True)
class BartOptions:
    """The encoder's config.json keys (the decoder's make the ArchitectureConfig)."""

    encoder_layers: int = _BART_DEFAULTS["encoder_layers"]
    encoder_attention_heads: int = _BART_DEFAULTS["encoder_attention_heads"]
    encoder_ffn_dim: int = _BART_DEFAULTS["encoder_ffn_dim"]
    scale_embedding: bool = _BART_DEFAULTS["scale_embedding"]


@dataclasses.dataclass(frozen=True)
class BartEncoderConfig:
    num_layers: int
    num_heads: int
    ffn_dim: int

    @classmethod
    def from_options(cls, options: BartOptions, hidden: int) -> "BartEncoderConfig":
        values = []
        for key in ("encoder_layers", "encoder_attention_heads", "encoder_ffn_dim"):
            value = getattr(options, key)
            if not 0 < value <= 1 << 20:
                raise ConfigError(f"config.json: {key!r} must be a positive integer, got {value!r}")
            values.append(value)
        if hidden % values[1]:
            raise ConfigError(f"config.json: d_model ({hidden}) is not divisible by "
                              f"encoder_attention_heads ({values[1]})")
        return cls(*values)


class BartLayer(nn.Module):
    """A post-norm encoder layer, or with ``cross`` a decoder layer."""

    def __init__(self, hidden: int, heads: int, ffn_dim: int, activation: str, cross: bool):
        super().__init__()
        self.activation = activation
        self.self_attn = ProjectedAttention(hidden, heads, key_bias=True)
        self.self_attn_layer_norm = LayerNorm(hidden, LAYER_NORM_EPS)
        if cross:
            self.encoder_attn = ProjectedAttention(hidden, heads, key_bias=True)
            self.encoder_attn_layer_norm = LayerNorm(hidden, LAYER_NORM_EPS)
        self.fc1 = Linear(hidden, ffn_dim, True)
        self.fc2 = Linear(ffn_dim, hidden, True)
        self.final_layer_norm = LayerNorm(hidden, LAYER_NORM_EPS)

    def forward(self, op, hidden, mask, past_key=None, past_value=None, cross=None,
                cross_mask=None):
        attn, key, value = self.self_attn(op, hidden, mask, past_key, past_value)
        hidden = self.self_attn_layer_norm(op, op.Add(hidden, attn))
        if cross is not None:
            attn, _, _ = self.encoder_attn(op, hidden, cross_mask, key=cross[0], value=cross[1])
            hidden = self.encoder_attn_layer_norm(op, op.Add(hidden, attn))
        mlp = self.fc2(op, apply_activation(op, self.fc1(op, hidden), self.activation))
        return self.final_layer_norm(op, op.Add(hidden, mlp)), key, value


class LearnedPositions(nn.Module):
    """BART's position table, read at position + 2."""

    def __init__(self, num_positions: int, hidden: int):
        super().__init__()
        self.weight = Weight([num_positions + POSITION_OFFSET, hidden])

    def forward(self, op, positions):
        offset = op.Constant(value=ir.tensor(np.array(POSITION_OFFSET, np.int64)))
        return op.Gather(self.weight, op.Add(positions, offset), axis=0)


class BartStack(nn.Module):
    """Positions (BART: learned, then ``layernorm_embedding``; ``positions`` given: that
    module, no embedding norm), then the layers."""

    def __init__(self, config: ArchitectureConfig, layers: int, heads: int, ffn_dim: int,
                 decoder: bool, positions: nn.Module | None = None):
        super().__init__()
        hidden = config.hidden_size
        if positions is None:
            self.embed_positions = LearnedPositions(config.max_position_embeddings, hidden)
            self.layernorm_embedding = LayerNorm(hidden, LAYER_NORM_EPS)
        else:
            self.embed_positions, self.layernorm_embedding = positions, None
        self.layers = nn.ModuleList([BartLayer(hidden, heads, ffn_dim, config.hidden_act, decoder)
                                     for _ in range(layers)])

    def forward(self, op, embeds, positions, mask, past=None, cross=None, cross_mask=None):
        """``positions`` [batch, seq] int64, from 0."""
        hidden = op.Add(embeds, self.embed_positions(op, positions))
        if self.layernorm_embedding is not None:
            hidden = self.layernorm_embedding(op, hidden)
        presents = []
        for i, layer in enumerate(self.layers):
            past_key, past_value = past[i] if past is not None else (None, None)
            hidden, key, value = layer(op, hidden, mask, past_key, past_value,
                                       cross[i] if cross is not None else None, cross_mask)
            presents.append((key, value))
        return hidden, presents


class BartModel(nn.Module):
    """The ``model.`` container of the checkpoint: ``encoder`` and ``decoder``, each with
    its ``embed_tokens`` (read from ``model.shared`` where the checkpoint has no copy)."""

    def __init__(self, config: ArchitectureConfig, encoder: BartEncoderConfig, positions=None):
        super().__init__()
        hidden, vocab = config.hidden_size, config.vocab_size
        self.encoder = BartStack(config, encoder.num_layers, encoder.num_heads, encoder.ffn_dim,
                                 decoder=False, positions=positions and positions())
        self.decoder = BartStack(config, config.num_hidden_layers, config.num_attention_heads,
                                 config.intermediate_size, decoder=True,
                                 positions=positions and positions())
        self.encoder.embed_tokens = Embedding(vocab, hidden)
        self.decoder.embed_tokens = Embedding(vocab, hidden)


def _positions(op, input_ids, past_len=None):
    """past .. past + seq - 1 as [batch, seq], counted over input_ids so that shape
    inference keeps [batch_size, sequence_length] (the Skip*Norm fusions check it)."""
    one = op.Constant(value_int=1)
    ones = op.Add(op.Mul(input_ids, op.Constant(value_int=0)), one)
    positions = op.Sub(op.CumSum(ones, one), one)
    return positions if past_len is None else op.Add(positions, past_len)


class BartForConditionalGeneration(nn.Module):
    """The text2text module protocol of mobius/tasks/text2text.py. ``positions``: a
    factory of each stack's position module (Marian's sinusoids), else BART's."""

    def __init__(self, config: ArchitectureConfig, positions=None):
        super().__init__()
        encoder = BartEncoderConfig.from_options(config.options, config.hidden_size)
        self.model = BartModel(config, encoder, positions)
        self.embed_scale = math.sqrt(config.hidden_size) if config.options.scale_embedding else None
        tied = self.model.decoder.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = LMHead(config.hidden_size, config.vocab_size, tied=tied)
        # the head's Gemm adds final_logits_bias [1, vocab] as its bias
        self.lm_head.bias = Weight([config.vocab_size], checkpoint_shape=[1, config.vocab_size],
                                   checkpoint_name="final_logits_bias",
                                   transform=lambda a: a.reshape(-1))

    def _scaled(self, op, embeds):
        if self.embed_scale is None:
            return embeds
        scale = np.array(self.embed_scale, dtype=numpy_dtype(get_build_dtype()))
        return op.Mul(embeds, op.Constant(value=ir.tensor(scale)))

    def encode(self, op, input_ids, attention_mask):
        """-> encoder_hidden_states (cross_key_values projects them per decoder layer)."""
        model = self.model
        with module_scope(op, model.name):
            with module_scope(op, model.encoder.name):
                embeds = self._scaled(op, model.encoder.embed_tokens(op, input_ids))
            mask = padding_mask(op, attention_mask, get_build_dtype())
            hidden, _ = model.encoder(op, embeds, _positions(op, input_ids), mask)
        return hidden

    def cross_key_values(self, op, hidden):
        """-> [(cross key, cross value) per decoder layer] of the encoder's states."""
        decoder, cross = self.model.decoder, []
        with module_scope(op, self.model.name):
            for layer in decoder.layers:
                with module_scope(op, decoder.name, layer.name, layer.encoder_attn.name):
                    cross.append(layer.encoder_attn.project_key_value(op, hidden))
        return cross

    def decode(self, op, input_ids, encoder_attention_mask, past, cross):
        """-> (logits, [(present key, present value) per decoder layer])."""
        dtype, model = get_build_dtype(), self.model
        past_len = op.Shape(past[0][0], start=2, end=3)
        total_len = op.Add(past_len, op.Shape(input_ids, start=1, end=2))
        ones = op.ConstantOfShape(op.Concat(op.Shape(input_ids, start=0, end=1), total_len, axis=0),
                                  value=ir.tensor(np.array([1], dtype=np.int64)))
        mask = causal_padding_mask(op, input_ids, ones, dtype)
        cross_mask = padding_mask(op, encoder_attention_mask, dtype, query_ids=input_ids)
        with module_scope(op, model.name):
            with module_scope(op, model.decoder.name):
                embeds = self._scaled(op, model.decoder.embed_tokens(op, input_ids))
            hidden, presents = model.decoder(op, embeds, _positions(op, input_ids, past_len),
                                             mask, past, cross, cross_mask)
        return self.lm_head(op, hidden), presents


FAMILY = ModelFamily(
    name="bart", cohorts=("every-dtype",),
    model_types=("bart",),
    architectures=("BartForConditionalGeneration",),
    module=BartForConditionalGeneration,
    task=text2text.TASK,
    tiny_preset="tiny-bart",
    normalize_raw=normalize_bart,
    config_overrides=lambda raw: {"rms_norm_eps": LAYER_NORM_EPS},
    options=BartOptions,
    checkpoint_aliases=tuple((f"model.{stack}.embed_tokens.",
                              (f"model.{stack}.embed_tokens.", "model.shared."))
                             for stack in ("encoder", "decoder")),
    ignored_tensors=lambda config: (
        IgnoredTensors(r"model\.shared\.weight",
                       "untied checkpoints: each stack reads its own embed_tokens"),
        *((IgnoredTensors(r"lm_head\.weight", "tied head: transformers reads model.shared"),)
          if config.tie_word_embeddings else ()),
    ),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # BART: encoder 3 layers x 6 heads, decoder 2 x 4 heads (the cross K/V are the
    # decoder's), scaled embeddings, 40 positions (+2 offset rows).
    "tiny-bart": {
        "model_type": "bart", "architectures": ["BartForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE, "d_model": 48, "encoder_layers": 3, "decoder_layers": 2,
        "encoder_attention_heads": 6, "decoder_attention_heads": 4, "encoder_ffn_dim": 100,
        "decoder_ffn_dim": 88, "max_position_embeddings": 40, "activation_function": "gelu",
        "scale_embedding": True, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
        "decoder_start_token_id": 2, "forced_eos_token_id": None, "tie_word_embeddings": True,
    },
}
