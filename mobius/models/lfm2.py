"""LFM2: a hybrid of gated short-convolution layers and GQA attention layers.

Each layer is ``x + op(operator_norm(x))``, then ``x + feed_forward(ffn_norm(x))``,
where ``op`` is attention (per-head RMS-normed Q/K, RoPE) on the layers
``layer_types`` marks ``full_attention`` (or ``full_attn_idxs`` lists) and a
:class:`~mobius.components.short_conv.ShortConv` on the ``conv`` layers. The
final norm is ``embedding_norm``. Attention layers keep the usual KV cache;
conv layers carry their state as ``past_key_values.{i}.conv`` / ``present.{i}.conv``
[batch, hidden, conv_L_cache - 1] (a recurrent state, mobius/tasks/causal_lm.py),
the layout onnxruntime-genai's ``lfm2`` type runs (names from its genai_config).

Padding: transformers zeroes a padding position's input to the conv layers
(its mask for the current chunk); the graph does the same with the chunk's
slice of ``attention_mask``, so a left-padded batch is exact, biases included.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.attention import Attention
from mobius.components.attention_mask import causal_padding_mask
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.components.short_conv import ShortConv, chunk_inputs
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import finite_float, positive_int
from mobius.config.options import read_options
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.tiny.bases import COMMON

LAYER_KINDS = ("full_attention", "conv")


@dataclasses.dataclass(frozen=True)
class Lfm2Options:
    """config.json switches, with transformers' Lfm2Config defaults."""

    conv_bias: bool = False
    conv_L_cache: int = 3
    block_multiple_of: int = 256
    block_auto_adjust_ff_dim: bool = True
    norm_eps: float = 1e-5


def options(config_or_raw) -> Lfm2Options:
    raw = getattr(config_or_raw, "raw", config_or_raw)
    o = read_options(Lfm2Options, raw)
    if positive_int("conv_L_cache", o.conv_L_cache) < 2:
        raise ConfigError(f"config.json: conv_L_cache must be at least 2, got {o.conv_L_cache}")
    positive_int("block_multiple_of", o.block_multiple_of)
    return o


def feed_forward_size(raw: Mapping[str, Any], intermediate_size: int, o: Lfm2Options) -> int:
    """transformers' Lfm2MLP width: 2/3 of intermediate_size, times block_ffn_dim_multiplier,
    rounded up to block_multiple_of, when auto-adjusted."""
    if not o.block_auto_adjust_ff_dim:
        return intermediate_size
    multiplier = raw.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is None:  # transformers 5's Lfm2Config refuses it too
        raise ConfigError("config.json: block_ffn_dim_multiplier must be a number, got null")
    multiplier = finite_float("block_ffn_dim_multiplier", multiplier, positive=True)
    size = int(multiplier * int(2 * intermediate_size / 3))
    step = o.block_multiple_of
    return positive_int("intermediate_size", step * ((size + step - 1) // step))


def layer_types(raw: Mapping[str, Any], layers: int) -> tuple[str, ...]:
    """``layer_types``, else ``full_attn_idxs`` (default: every layer attention)."""
    if raw.get("layer_types") is not None:
        kinds = tuple(raw["layer_types"])
    else:
        indices = raw.get("full_attn_idxs")
        indices = range(layers) if indices is None else indices
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            raise ConfigError(f"config.json: full_attn_idxs must list integers, got {indices!r}")
        kinds = tuple("full_attention" if i in set(indices) else "conv" for i in range(layers))
    bad = sorted({str(k) for k in kinds} - set(LAYER_KINDS))
    if bad:
        raise ConfigError(f"config.json: lfm2 layer_types must be {' or '.join(LAYER_KINDS)}, "
                          f"got {bad}")
    return kinds


def normalize_hybrid(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What Lfm2Config and Lfm2MoeConfig share: tie_embedding wins, tied embeddings by
    default, norm_eps, RoPE theta 1e6 by default, layer kinds from full_attn_idxs."""
    raw = dict(raw)
    if raw.get("tie_embedding") is not None:
        raw["tie_word_embeddings"] = raw["tie_embedding"]
    if raw.get("tie_word_embeddings") is None:
        raw["tie_word_embeddings"] = True
    if raw.get("rope_theta") is None and not (raw.get("rope_parameters") or {}).get("rope_theta"):
        raw["rope_theta"] = 1e6
    raw["rms_norm_eps"] = options(raw).norm_eps
    layers = positive_int("num_hidden_layers", raw.get("num_hidden_layers"))
    raw["layer_types"] = list(layer_types(raw, layers))
    return raw


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Lfm2Config's spellings: block_ff_dim wins over intermediate_size, then the rest."""
    raw = dict(raw)
    if raw.get("block_ff_dim") is not None:
        raw["intermediate_size"] = raw["block_ff_dim"]
    return normalize_hybrid(raw)


def overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    size = positive_int("intermediate_size", raw.get("intermediate_size"))
    return {"intermediate_size": feed_forward_size(raw, size, options(raw)), "qk_norm": True}


def attention(config: ArchitectureConfig, i: int, body: str = "model") -> Attention:
    """body: the decoder's checkpoint prefix (LFM2-Audio's ``lfm``)."""
    d, eps = config.head_dim, config.rms_norm_eps
    attn = Attention(config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                     d, config.rope.rotary_dim, q_norm=RMSNorm(d, eps), k_norm=RMSNorm(d, eps),
                     qk_norm_names=("q_layernorm", "k_layernorm"))
    attn.o_proj = Linear(config.num_attention_heads * d, config.hidden_size,
                         prefix=f"{body}.layers.{i}.self_attn.out_proj")
    return attn


def feed_forward(config: ArchitectureConfig, i: int, size: int | None = None,
                 body: str = "model") -> GatedMLP:
    """SwiGLU with transformers' w1 (gate), w3 (up), w2 (down); body: as for attention."""
    size = config.intermediate_size if size is None else size
    mlp = GatedMLP(config.hidden_size, size, "silu")
    prefix = f"{body}.layers.{i}.feed_forward"
    mlp.gate_proj = Linear(config.hidden_size, size, prefix=f"{prefix}.w1")
    mlp.up_proj = Linear(config.hidden_size, size, prefix=f"{prefix}.w3")
    mlp.down_proj = Linear(size, config.hidden_size, prefix=f"{prefix}.w2")
    return mlp


class Lfm2DecoderLayer(nn.Module):
    """operator_norm -> attention or conv -> residual; ffn_norm -> feed_forward -> residual.

    sandwich: each branch's output is RMS-normed before its residual add
    (LFM3's post_operator_norm / post_ffn_norm)."""

    def __init__(self, config: ArchitectureConfig, operator: nn.Module, mlp: nn.Module,
                 sandwich: bool = False):
        super().__init__()
        self.is_conv = isinstance(operator, ShortConv)
        if self.is_conv:
            self.conv = operator
        else:
            self.self_attn = operator
        self.feed_forward = mlp
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.operator_norm = RMSNorm(hidden, eps)
        self.ffn_norm = RMSNorm(hidden, eps)
        self.post_operator_norm = RMSNorm(hidden, eps) if sandwich else None
        self.post_ffn_norm = RMSNorm(hidden, eps) if sandwich else None

    def forward(self, op, hidden, cos, sin, mask, chunk, *past):
        normed = self.operator_norm(op, hidden)
        if self.is_conv:
            out, *presents = self.conv(op, normed, chunk, *past)
        else:
            out, *presents = self.self_attn(op, normed, cos, sin, mask, *past)
        if self.post_operator_norm is not None:
            out = self.post_operator_norm(op, out)
        hidden = op.Add(hidden, out)
        out = self.feed_forward(op, self.ffn_norm(op, hidden))
        if self.post_ffn_norm is not None:
            out = self.post_ffn_norm(op, out)
        return op.Add(hidden, out), tuple(presents)


class Lfm2Model(CausalTransformer):
    """embed_tokens -> layers -> embedding_norm; conv layers also get the chunk's mask,
    attention layers the cos/sin of their RoPE kind and the mask of their window."""

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values,
                inputs_embeds=None):
        tokens = input_ids if inputs_embeds is None else inputs_embeds
        hidden = self.embed_tokens(op, input_ids) if inputs_embeds is None else inputs_embeds
        rotary = {kind: getattr(self, f"rotary_emb_{kind}")(op, position_ids)
                  for kind in self.rope_kinds if kind in self.layer_rope_kinds}
        dtype = get_build_dtype()
        chunk = op.Slice(attention_mask, op.Neg(op.Shape(tokens, start=1, end=2)),
                         op.Constant(value_ints=[2**62]), op.Constant(value_ints=[1]))
        widths = {layer.conv.state_shape[1] for layer in self.layers if layer.is_conv}
        conv_chunk = chunk_inputs(op, chunk, dtype, widths.pop()) if widths else None
        masks, presents = {}, []
        for i, (layer, past) in enumerate(zip(self.layers, past_key_values)):
            window = self.config.layer_sliding_window(i)
            if not layer.is_conv and window not in masks:
                masks[window] = causal_padding_mask(op, tokens, attention_mask, dtype, window)
            cos, sin = rotary.get(self.layer_rope_kinds[i], (None, None))
            hidden, present = layer(op, hidden, cos, sin, masks.get(window), conv_chunk, *past)
            presents.append(present)
        return self.embedding_norm(op, hidden), presents


def conv_layers(config: ArchitectureConfig) -> list[int]:
    return [i for i, kind in enumerate(config.layer_types) if kind == "conv"]


class Lfm2ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig, mlps: list[nn.Module] | None = None,
                 body_attribute: str = "model"):
        """mlps: each layer's feed-forward block (LFM2-MoE's experts); default SwiGLU.
        body_attribute: the decoder's checkpoint prefix (LFM2-Audio's ``lfm``)."""
        o = options(config)
        convs = set(conv_layers(config))
        mlps = mlps or [feed_forward(config, i, body=body_attribute)
                        for i in range(config.num_hidden_layers)]
        layers = [Lfm2DecoderLayer(
            config, ShortConv(config.hidden_size, o.conv_L_cache, o.conv_bias) if i in convs
            else attention(config, i, body_attribute), mlps[i])
            for i in range(config.num_hidden_layers)]
        body = Lfm2Model(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                         norm_attribute="embedding_norm")
        super().__init__(config, body, body_attribute=body_attribute)
        #: read by the text-generation task: these layers carry a conv state, not a KV cache
        self.recurrent_states = {i: (("conv", layers[i].conv.state_shape),)
                                 for i in sorted(convs)}


FAMILY = ModelFamily(
    name="lfm2",
    model_types=("lfm2",),
    architectures=("Lfm2ForCausalLM",),
    module=Lfm2ForCausalLM,
    normalize_raw=normalize,
    config_overrides=overrides,
    tiny_preset="tiny-lfm2",
    cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # hybrid: conv, attention, conv layers; the MLP width is 2/3 of 172 times 1.5, rounded
    # up to a multiple of 12 (= 180). No conv biases, as released LFM2s: a left-padded row
    # then equals the row alone (transformers zeroes the padding's conv input, a bias is
    # not zeroed); lfm2_families_test.py covers conv_bias.
    "tiny-lfm2": {
        **COMMON, "model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"],
        "num_hidden_layers": 3, "full_attn_idxs": [1], "conv_L_cache": 3, "conv_bias": False,
        "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.5,
        "block_multiple_of": 12, "norm_eps": 1e-5,
    },
}
