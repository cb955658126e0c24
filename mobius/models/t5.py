"""T5 and mT5 (text2text-generation, encoder-decoder), built as two models
(mobius/tasks/text2text.py): ``encoder`` (states + every decoder layer's cross K/V)
and ``decoder`` (self cache + cross cache -> logits).

Math as transformers' T5ForConditionalGeneration / MT5ForConditionalGeneration:

* one token table ``shared`` for the encoder, the decoder and (tied) the LM head
  (the decoder graph reads its own copy of it, as ``decoder.embed_tokens``);
* pre-norm blocks: x + attn(norm(x)), [x + cross_attn(norm(x), encoder states)],
  x + ff(norm(x)); then ``final_layer_norm``. T5's LayerNorm is RMS-only (no mean,
  no bias): the standard RMSNormalization op;
* attention has no biases and no 1/sqrt(d) scaling (folded into the weights at
  training time); heads may be ``d_kv`` wide with heads * d_kv != d_model;
* the relative position bias (mobius/components/relative_position.py) lives in the
  first block's self-attention of each stack and is shared by all its blocks:
  bidirectional buckets in the encoder, causal in the decoder (queries at
  past .. past + seq - 1); cross-attention has none;
* feed-forward ``feed_forward_proj``: "relu" (wi -> act -> wo) or "gated-<act>"
  (act(wi_0 x) * wi_1 x -> wo), "gated-gelu" being gelu_new as in transformers;
* the LM head: ``lm_head.weight`` when config.json says ``tie_word_embeddings:
  false`` (T5 v1.1, flan-t5, mT5), else ``shared.weight``. t5 scales the decoder
  output by d_model**-0.5 before a tied head (``scale_decoder_outputs``, as
  transformers 5 saves it; from ``tie_word_embeddings`` in older config.json);
  mT5 never scales (transformers 5's MT5ForConditionalGeneration does not).

transformers clamps float16 hidden states only when they overflow to inf; the f16
graph does not (its tolerance is stated in the parity test).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import SUPPORTED_ACTIVATIONS, apply_activation
from mobius.components.attention import scaled_dot_product_attention
from mobius.components.attention_mask import causal_padding_mask, padding_mask
from mobius.components.embedding import Embedding
from mobius.components.linear import Linear
from mobius.components.lm_head import LMHead
from mobius.components.relative_position import RelativePositionBias
from mobius.components.rms_norm import RMSNorm
from mobius.components.scope import module_scope
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.tasks import text2text
from mobius.weights.attach import IgnoredTensors
from mobius.weights.dtypes import numpy_dtype
from mobius.tiny.bases import VOCAB_SIZE

#: transformers' T5Config defaults (t5-small), for keys a config.json leaves out.
_T5_DEFAULTS: Mapping[str, Any] = {
    "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6,
    "num_heads": 8, "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128,
    "layer_norm_epsilon": 1e-6, "feed_forward_proj": "relu", "pad_token_id": 0, "eos_token_id": 1,
}


def normalize_t5(raw: Mapping[str, Any]) -> dict[str, Any]:
    """T5Config's defaults filled in; the decoder's fields under the standard names."""
    out = {**_T5_DEFAULTS, **raw}
    decoder_layers = out.get("num_decoder_layers") or out["num_layers"]
    out.update(
        hidden_size=out["d_model"], num_hidden_layers=decoder_layers,
        num_attention_heads=out["num_heads"], num_key_value_heads=out["num_heads"],
        head_dim=out["d_kv"], intermediate_size=out["d_ff"],
        max_position_embeddings=out.get("n_positions") or 512,
        hidden_act=T5Settings.from_raw(out).activation,
        tie_word_embeddings=out.get("tie_word_embeddings") is not False,
    )
    return out


def _positive_int(raw: Mapping[str, Any], key: str, limit: int = 1 << 20) -> int:
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
        raise ConfigError(f"config.json: {key!r} must be an integer in 1..{limit}, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class T5Options:
    """The T5 keys the module reads (T5Settings checks them when the config is normalized)."""

    num_layers: int = _T5_DEFAULTS["num_layers"]
    relative_attention_num_buckets: int = _T5_DEFAULTS["relative_attention_num_buckets"]
    relative_attention_max_distance: int = _T5_DEFAULTS["relative_attention_max_distance"]
    feed_forward_proj: str = _T5_DEFAULTS["feed_forward_proj"]
    tie_word_embeddings: bool = True
    scale_decoder_outputs: bool | None = None  # None: scaled where the head is tied


@dataclasses.dataclass(frozen=True)
class T5Settings:
    """The T5-only switches of config.json, typed, with transformers' defaults."""

    encoder_layers: int
    num_buckets: int
    max_distance: int
    activation: str
    gated: bool
    tied: bool
    scale_decoder_outputs: bool

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any], scales_tied_head: bool = True) -> "T5Settings":
        raw = {**_T5_DEFAULTS, **raw}
        proj = raw["feed_forward_proj"]
        parts = proj.split("-") if isinstance(proj, str) else []
        if not 1 <= len(parts) <= 2 or (len(parts) == 2 and parts[0] != "gated"):
            raise ConfigError(f"config.json: feed_forward_proj {proj!r} is not '<act>' or "
                              "'gated-<act>'")
        activation = "gelu_new" if proj == "gated-gelu" else parts[-1]
        if activation not in SUPPORTED_ACTIVATIONS:
            raise ConfigError(f"config.json: feed_forward_proj activation {activation!r} is not "
                              f"supported; supported: {', '.join(SUPPORTED_ACTIVATIONS)}")
        num_buckets = _positive_int(raw, "relative_attention_num_buckets", 4096)
        if num_buckets < 4:  # bidirectional halves, then half are exact: at least one each
            raise ConfigError("config.json: relative_attention_num_buckets must be at least 4")
        max_distance = _positive_int(raw, "relative_attention_max_distance", 1 << 16)
        if max_distance <= num_buckets // 2:
            raise ConfigError("config.json: relative_attention_max_distance must exceed "
                              "relative_attention_num_buckets / 2")
        tied = raw.get("tie_word_embeddings") is not False
        scale = raw.get("scale_decoder_outputs", tied) if scales_tied_head else False
        return cls(encoder_layers=_positive_int(raw, "num_layers", 1024), num_buckets=num_buckets,
                   max_distance=max_distance, activation=activation,
                   gated=len(parts) == 2, tied=tied, scale_decoder_outputs=bool(scale))

    @classmethod
    def from_options(cls, options: T5Options, scales_tied_head: bool = True) -> "T5Settings":
        """As from_raw, from the keys config.options holds (None: left out of config.json)."""
        given = {key: value for key, value in dataclasses.asdict(options).items()
                 if value is not None}
        return cls.from_raw(given, scales_tied_head)


class T5Attention(nn.Module):
    """q/k/v/o without biases, no score scaling; ``relative_attention_bias`` in a
    stack's first block only."""

    def __init__(self, config: ArchitectureConfig, bias: RelativePositionBias | None = None):
        super().__init__()
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        inner = self.num_heads * self.head_dim
        self.q = Linear(config.hidden_size, inner, False)
        self.k = Linear(config.hidden_size, inner, False)
        self.v = Linear(config.hidden_size, inner, False)
        self.o = Linear(inner, config.hidden_size, False)
        if bias is not None:
            self.relative_attention_bias = bias

    def _heads(self, op, x):
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def project_key_value(self, op, states):
        return self._heads(op, self.k(op, states)), self._heads(op, self.v(op, states))

    def forward(self, op, hidden, mask, past_key=None, past_value=None, *, key=None, value=None):
        query = self._heads(op, self.q(op, hidden))
        if key is None:
            key, value = self.project_key_value(op, hidden)
        attn, present_key, present_value = scaled_dot_product_attention(
            op, query, key, value, mask, past_key, past_value, scale=1.0)
        attn = op.Transpose(attn, perm=[0, 2, 1, 3])
        attn = op.Reshape(attn, op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        return self.o(op, attn), present_key, present_value


class T5LayerSelfAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig, bias: RelativePositionBias | None):
        super().__init__()
        self.SelfAttention = T5Attention(config, bias)
        self.layer_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, hidden, mask, past_key, past_value):
        attn, key, value = self.SelfAttention(op, self.layer_norm(op, hidden), mask, past_key,
                                              past_value)
        return op.Add(hidden, attn), key, value


class T5LayerCrossAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.EncDecAttention = T5Attention(config)
        self.layer_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, hidden, mask, key, value):
        attn, _, _ = self.EncDecAttention(op, self.layer_norm(op, hidden), mask, key=key,
                                          value=value)
        return op.Add(hidden, attn)


class T5DenseFF(nn.Module):
    """wi -> act -> wo, or gated: act(wi_0 x) * wi_1 x -> wo."""

    def __init__(self, config: ArchitectureConfig, settings: T5Settings):
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.activation, self.gated = settings.activation, settings.gated
        if settings.gated:
            self.wi_0 = Linear(hidden, inner, False)
            self.wi_1 = Linear(hidden, inner, False)
        else:
            self.wi = Linear(hidden, inner, False)
        self.wo = Linear(inner, hidden, False)

    def forward(self, op, x):
        if self.gated:
            inner = op.Mul(apply_activation(op, self.wi_0(op, x), self.activation),
                           self.wi_1(op, x))
        else:
            inner = apply_activation(op, self.wi(op, x), self.activation)
        return self.wo(op, inner)


class T5LayerFF(nn.Module):
    def __init__(self, config: ArchitectureConfig, settings: T5Settings):
        super().__init__()
        self.DenseReluDense = T5DenseFF(config, settings)
        self.layer_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, hidden):
        return op.Add(hidden, self.DenseReluDense(op, self.layer_norm(op, hidden)))


class T5Block(nn.Module):
    """``layer``: [self-attention, (cross-attention,) feed-forward], as the checkpoint."""

    def __init__(self, config: ArchitectureConfig, settings: T5Settings, decoder: bool,
                 bias: RelativePositionBias | None):
        super().__init__()
        parts = [T5LayerSelfAttention(config, bias)]
        if decoder:
            parts.append(T5LayerCrossAttention(config))
        self.layer = nn.ModuleList([*parts, T5LayerFF(config, settings)])

    def forward(self, op, hidden, mask, past_key=None, past_value=None, cross=None,
                cross_mask=None):
        hidden, key, value = self.layer[0](op, hidden, mask, past_key, past_value)
        if cross is not None:
            hidden = self.layer[1](op, hidden, cross_mask, *cross)
        return self.layer[-1](op, hidden), key, value


class T5Stack(nn.Module):
    """The encoder (bidirectional buckets) or the decoder (causal buckets, caches)."""

    def __init__(self, config: ArchitectureConfig, settings: T5Settings, layers: int,
                 decoder: bool):
        super().__init__()
        bias = RelativePositionBias(settings.num_buckets, config.num_attention_heads,
                                    settings.max_distance, bidirectional=not decoder)
        self.block = nn.ModuleList([T5Block(config, settings, decoder, bias if i == 0 else None)
                                    for i in range(layers)])
        self.final_layer_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, hidden, mask, query_positions, key_positions, past=None, cross=None,
                cross_mask=None):
        """``mask``: additive [batch, 1, q, k]; the position bias is added once, in the
        first block's scope (where its weight lives), and shared by all blocks."""
        first = self.block[0].layer[0]
        with module_scope(op, self.block[0].name, first.name, first.SelfAttention.name):
            bias = first.SelfAttention.relative_attention_bias(op, query_positions,
                                                               key_positions)
        mask = op.Add(mask, bias)  # [batch, heads, q, k]
        presents = []
        for i, block in enumerate(self.block):
            past_key, past_value = past[i] if past is not None else (None, None)
            hidden, key, value = block(op, hidden, mask, past_key, past_value,
                                       cross[i] if cross is not None else None, cross_mask)
            presents.append((key, value))
        return self.final_layer_norm(op, hidden), presents


def _range(op, start, end):
    return op.Range(op.Squeeze(start), op.Squeeze(end), op.Constant(value_int=1))


class T5ForConditionalGeneration(nn.Module):
    """The text2text module protocol of mobius/tasks/text2text.py."""

    def __init__(self, config: ArchitectureConfig, scales_tied_head: bool = True):
        super().__init__()
        settings = T5Settings.from_options(config.options, scales_tied_head)
        self.shared = Embedding(config.vocab_size, config.hidden_size)
        self.encoder = T5Stack(config, settings, settings.encoder_layers, decoder=False)
        self.decoder = T5Stack(config, settings, config.num_hidden_layers, decoder=True)
        self.decoder.embed_tokens = Embedding(config.vocab_size, config.hidden_size,
                                              checkpoint_name="shared.weight")
        self.lm_head = LMHead(config.hidden_size, config.vocab_size,
                              tied=self.decoder.embed_tokens if settings.tied else None)
        self.output_scale = config.hidden_size**-0.5 if settings.scale_decoder_outputs else None

    def encode(self, op, input_ids, attention_mask):
        """-> encoder_hidden_states (cross_key_values projects them per decoder layer)."""
        positions = _range(op, op.Constant(value_int=0), op.Shape(input_ids, start=1, end=2))
        mask = padding_mask(op, attention_mask, get_build_dtype())
        hidden, _ = self.encoder(op, self.shared(op, input_ids), mask, positions, positions)
        return hidden

    def cross_key_values(self, op, hidden):
        """-> [(cross key, cross value) per decoder layer] of the encoder's states."""
        cross = []
        for block in self.decoder.block:
            attention = block.layer[1]
            with module_scope(op, self.decoder.name, block.name, attention.name,
                              attention.EncDecAttention.name):
                cross.append(attention.EncDecAttention.project_key_value(op, hidden))
        return cross

    def decode(self, op, input_ids, encoder_attention_mask, past, cross):
        """-> (logits, [(present key, present value) per decoder layer])."""
        dtype = get_build_dtype()
        past_len = op.Shape(past[0][0], start=2, end=3)
        total_len = op.Add(past_len, op.Shape(input_ids, start=1, end=2))
        # no decoder padding (mobius/tasks/text2text.py): ones over the cache, causal part only
        ones = op.ConstantOfShape(op.Concat(op.Shape(input_ids, start=0, end=1), total_len, axis=0),
                                  value=ir.tensor(np.array([1], dtype=np.int64)))
        mask = causal_padding_mask(op, input_ids, ones, dtype)
        cross_mask = padding_mask(op, encoder_attention_mask, dtype, query_ids=input_ids)
        with module_scope(op, self.decoder.name):
            embeds = self.decoder.embed_tokens(op, input_ids)
        hidden, presents = self.decoder(
            op, embeds, mask, _range(op, past_len, total_len),
            _range(op, op.Constant(value_int=0), total_len), past, cross, cross_mask)
        if self.output_scale is not None:
            scale = np.array(self.output_scale, dtype=numpy_dtype(dtype))
            hidden = op.Mul(hidden, op.Constant(value=ir.tensor(scale)))
        return self.lm_head(op, hidden), presents


def _ignored(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    return (
        IgnoredTensors(r"(encoder|decoder)\.embed_tokens\.weight",
                       "older checkpoints save the stacks' copies of shared.weight"),
        IgnoredTensors(r"decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias"
                       r"\.weight", "cross-attention has no position bias (transformers ignores it)"),
        *((IgnoredTensors(r"lm_head\.weight", "tied head: transformers reads shared.weight"),)
          if config.tie_word_embeddings else ()),
    )


_OVERRIDES = lambda raw: {"rms_norm_eps": raw["layer_norm_epsilon"]}  # noqa: E731

T5 = ModelFamily(
    name="t5",
    model_types=("t5",),
    architectures=("T5ForConditionalGeneration",),
    module=T5ForConditionalGeneration,
    task=text2text.TASK,
    tiny_preset="tiny-t5",
    normalize_raw=normalize_t5,
    options=T5Options,
    config_overrides=_OVERRIDES,
    ignored_tensors=_ignored,
)

MT5 = ModelFamily(
    name="mt5",
    model_types=("mt5",),
    architectures=("MT5ForConditionalGeneration",),
    module=lambda config: T5ForConditionalGeneration(config, scales_tied_head=False),
    task=text2text.TASK,
    tiny_preset="tiny-mt5",
    normalize_raw=normalize_t5,
    options=T5Options,
    config_overrides=_OVERRIDES,
    ignored_tensors=_ignored,
)

FAMILIES = (T5, MT5)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Text2text: d_model 48 but 4 heads of d_kv 16 (inner 64); 8 buckets over distance 6, so
    # the exact, logarithmic and saturated buckets all occur at tiny lengths. tiny-t5: ReLU
    # feed-forward, head tied to `shared` (scaled); tiny-mt5: gated-gelu, 3 + 1 layers.
    "tiny-t5": {
        "model_type": "t5", "architectures": ["T5ForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE, "d_model": 48, "d_kv": 16, "d_ff": 88, "num_layers": 2,
        "num_decoder_layers": 2, "num_heads": 4, "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 6, "feed_forward_proj": "relu",
        "layer_norm_epsilon": 1e-6, "pad_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 0, "tie_word_embeddings": True,
    },
    "tiny-mt5": {
        "model_type": "mt5", "architectures": ["MT5ForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE, "d_model": 48, "d_kv": 16, "d_ff": 88, "num_layers": 3,
        "num_decoder_layers": 1, "num_heads": 4, "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 6, "feed_forward_proj": "gated-gelu",
        "layer_norm_epsilon": 1e-6, "pad_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 0,
    },
}
