"""LFM3: LFM2's conv / attention hybrid with sliding-window layers and sandwich norms.

From transformers' Lfm3 modeling: layers ``conv`` (LFM2's gated short convolution),
``sliding_attention`` (``sliding_window``) or ``full_attention``; each layer type its
own RoPE (rope_parameters nested by type; default: sliding plain RoPE base 1e4, full
proportional RoPE base 1e6 over half of each head, the rest unrotated). Attention:
per-head q_norm / k_norm before RoPE, q/k/v/o biases when ``attention_bias``, and
when ``use_attention_gate`` each head's output times sigmoid(gate_proj(x)) (one gate
per head; transformers' g_proj, saved as gate_proj). ``use_sandwich_norm``: each
branch's output is RMS-normed (post_operator_norm / post_ffn_norm) before its
residual add. The SwiGLU (w1/w3/w2) is ``intermediate_size`` as written; the final
norm is ``embedding_norm``; embeddings are tied by default. A "default"-type RoPE
spans the whole head whatever partial_rotary_factor says, as transformers computes it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.attention import Attention
from mobius.components.causal_transformer import CausalLM
from mobius.components.rms_norm import RMSNorm
from mobius.components.short_conv import ShortConv
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.config.rope import RopeConfig, RopeKeys
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.lfm2 import Lfm2DecoderLayer, Lfm2Model, feed_forward
from mobius.tiny.bases import COMMON

CONV, SLIDING, FULL = "conv", "sliding_attention", "full_attention"
#: Lfm3Config's RoPE per layer type where config.json gives none
DEFAULT_ROPE = {SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
                FULL: {"rope_type": "proportional", "rope_theta": 1e6,
                       "partial_rotary_factor": 0.5}}


@dataclasses.dataclass(frozen=True)
class Lfm3Options(RopeKeys):
    """config.json switches, with transformers' Lfm3Config defaults."""

    conv_bias: bool = False
    conv_L_cache: int = 7
    use_sandwich_norm: bool = True
    use_attention_gate: bool = True
    attention_bias: bool = False


def _default_layer_types(layers: int) -> list[str]:
    return [FULL if i % 4 == 2 else SLIDING if i % 4 == 0 and i > 0 else CONV
            for i in range(layers)]


def _rope_parameters(raw: Mapping[str, Any]) -> dict[str, dict]:
    params = raw.get("rope_parameters") or DEFAULT_ROPE
    if not isinstance(params, Mapping) or not {SLIDING, FULL} <= set(params):
        raise ConfigError(f"config.json: lfm3 rope_parameters must be nested by layer type "
                          f"({SLIDING!r}, {FULL!r}), got {params!r}")
    out = {}
    for kind in (SLIDING, FULL):
        p = dict(params[kind])
        if p.get("rope_type", "default") == "default":  # transformers rotates the whole head
            p.pop("partial_rotary_factor", None)
        out[kind] = p
    return out


def normalize_lfm3(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Lfm3Config's defaults (tied embeddings, head_dim 128, window 256, norm_eps, layer
    pattern, RoPE per layer type)."""
    out = {"tie_word_embeddings": True, "head_dim": 128, "sliding_window": 256, **raw}
    out["rms_norm_eps"] = out.get("norm_eps", 1e-5)
    layers = positive_int("num_hidden_layers", out.get("num_hidden_layers"))
    kinds = out.get("layer_types") or _default_layer_types(layers)
    bad = sorted({str(k) for k in kinds} - {CONV, SLIDING, FULL})
    if bad:
        raise ConfigError(f"config.json: lfm3 layer_types must be {CONV}, {SLIDING} or "
                          f"{FULL}, got {bad}")
    out["layer_types"] = list(kinds)
    out["rope_parameters"] = _rope_parameters(out)
    return out


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The model-level RoPE is the full-attention layers' one."""
    o = read_options(Lfm3Options, raw)
    if positive_int("conv_L_cache", o.conv_L_cache) < 2:
        raise ConfigError(f"config.json: conv_L_cache must be at least 2, got {o.conv_L_cache}")
    head_dim = positive_int("head_dim", raw["head_dim"])
    return {"rope": RopeConfig.from_hf({**raw, "rope_parameters": raw["rope_parameters"][FULL]},
                                       head_dim)}


def _attention(config: ArchitectureConfig) -> Attention:
    o, d, eps = config.options, config.head_dim, config.rms_norm_eps
    return Attention(config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                     d, d, qkv_bias=o.attention_bias, o_bias=o.attention_bias,
                     q_norm=RMSNorm(d, eps), k_norm=RMSNorm(d, eps),
                     head_gate=o.use_attention_gate)


class Lfm3ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = config.options
        kinds = config.layer_types
        layers = [Lfm2DecoderLayer(
            config, ShortConv(config.hidden_size, o.conv_L_cache, o.conv_bias) if kind == CONV
            else _attention(config), feed_forward(config, i), sandwich=o.use_sandwich_norm)
            for i, kind in enumerate(kinds)]
        sliding = RopeConfig.from_hf(
            o.rope_raw(config.max_position_embeddings,
                       rope_parameters=o.rope_parameters[SLIDING]), config.head_dim)
        body = Lfm2Model(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                         ropes={FULL: config.rope, SLIDING: sliding},
                         layer_rope_kinds=[None if kind == CONV else kind for kind in kinds],
                         norm_attribute="embedding_norm")
        super().__init__(config, body)
        #: read by the text-generation task: these layers carry a conv state, not a KV cache
        self.recurrent_states = {i: (("conv", layer.conv.state_shape),)
                                 for i, layer in enumerate(layers) if layer.is_conv}


FAMILY = ModelFamily(
    name="lfm3", model_types=("lfm3",), architectures=("Lfm3ForCausalLM",),
    module=Lfm3ForCausalLM, options=Lfm3Options, normalize_raw=normalize_lfm3,
    config_overrides=_overrides, tiny_preset="tiny-lfm3", cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # conv, sliding (window 4 < the tests' prompts), full, conv; kernel 3; q/k/v/o biases,
    # head gates and sandwich norms; full layers: proportional RoPE over half of each head.
    "tiny-lfm3": {
        **{k: v for k, v in COMMON.items() if k not in ("rms_norm_eps", "rope_theta")},
        "model_type": "lfm3", "architectures": ["Lfm3ForCausalLM"],
        "num_hidden_layers": 4, "layer_types": [CONV, SLIDING, FULL, CONV], "head_dim": 16,
        "intermediate_size": 88, "conv_L_cache": 3, "conv_bias": False, "norm_eps": 1e-5,
        "sliding_window": 4, "attention_bias": True, "use_attention_gate": True,
        "use_sandwich_norm": True, "tie_word_embeddings": True,
        "rope_parameters": {SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
                            FULL: {"rope_type": "proportional", "rope_theta": 40000.0,
                                   "partial_rotary_factor": 0.5}},
    },
}
