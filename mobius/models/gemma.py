"""Gemma, Gemma 2 and Gemma 3 (text).

All three: RMSNorm scaled by (1 + w), embeddings scaled by sqrt(hidden),
GELU-tanh gated MLP, tied embeddings. Gemma 2 adds sandwich norms,
attention-logit and final-logit softcapping, alternating sliding-window
layers and query scaling by query_pre_attn_scalar. Gemma 3 drops the
softcapping, adds per-head QK RMSNorm and gives local (sliding) and global
layers different RoPE bases.
"""

from __future__ import annotations

import dataclasses

from mobius.components.attention import Attention
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer, SandwichNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.rope import RopeConfig, RopeKeys
from mobius.models.family import ModelFamily
from mobius.tiny.bases import COMMON

SLIDING, FULL = "sliding_attention", "full_attention"


@dataclasses.dataclass(frozen=True)
class GemmaOptions:
    query_pre_attn_scalar: float | None = None
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None


@dataclasses.dataclass(frozen=True)
class Gemma3Options(GemmaOptions, RopeKeys):
    rope_local_base_freq: float = 10000.0  # transformers 4.x: the sliding layers' base


def _norm(config: ArchitectureConfig, size: int | None = None) -> RMSNorm:
    return RMSNorm(size or config.hidden_size, config.rms_norm_eps, weight_offset=1.0)


def _mlp(config: ArchitectureConfig) -> GatedMLP:
    return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)


def _attention(config: ArchitectureConfig, *, qk_norm: bool = False) -> Attention:
    scalar = config.options.query_pre_attn_scalar
    return Attention(
        config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
        config.head_dim, config.rope.rotary_dim,
        qkv_bias=config.qkv_bias, o_bias=config.o_bias,
        q_norm=_norm(config, config.head_dim) if qk_norm else None,
        k_norm=_norm(config, config.head_dim) if qk_norm else None,
        scale=scalar**-0.5 if scalar else None,
        softcap=config.options.attn_logit_softcapping,
    )


class GemmaForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [
            PreNormDecoderLayer(_attention(config), _mlp(config), _norm(config), _norm(config))
            for _ in range(config.num_hidden_layers)
        ]
        model = CausalTransformer(config, layers, _norm(config),
                                  embed_scale=config.hidden_size**0.5)
        super().__init__(config, model)


class Gemma2ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig, *, qk_norm: bool = False, ropes=None,
                 layer_rope_kinds=None):
        layers = [
            SandwichNormDecoderLayer(_attention(config, qk_norm=qk_norm), _mlp(config),
                                     _norm(config), _norm(config), _norm(config), _norm(config))
            for _ in range(config.num_hidden_layers)
        ]
        model = CausalTransformer(config, layers, _norm(config), ropes=ropes,
                                  layer_rope_kinds=layer_rope_kinds,
                                  embed_scale=config.hidden_size**0.5)
        super().__init__(config, model,
                         final_logit_softcap=config.options.final_logit_softcapping)


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    def __init__(self, config: ArchitectureConfig):
        ropes = _gemma3_ropes(config)
        kinds = [kind if kind in ropes else FULL for kind in config.layer_types] or None
        super().__init__(config, qk_norm=True, ropes=ropes, layer_rope_kinds=kinds)


def _gemma3_ropes(config: ArchitectureConfig) -> dict[str, RopeConfig]:
    """Per-layer-type RoPE (transformers 5 nests rope_parameters by layer type;
    4.x spells the local base as rope_local_base_freq)."""
    options = config.options
    params = options.rope_parameters or {}
    if SLIDING in params or FULL in params:
        return {kind: RopeConfig.from_hf(options.rope_raw(config.max_position_embeddings,
                                                          rope_parameters=params[kind]),
                                         config.head_dim)
                for kind in (SLIDING, FULL) if params.get(kind)}
    local = RopeConfig.from_hf(options.rope_raw(config.max_position_embeddings,
                                                rope_theta=options.rope_local_base_freq),
                               config.head_dim)
    return {SLIDING: local, FULL: config.rope}


def _gemma_overrides(raw) -> dict:
    return {"hidden_act": raw.get("hidden_activation") or raw.get("hidden_act") or "gelu_pytorch_tanh",
            "tie_word_embeddings": raw.get("tie_word_embeddings", True)}


def _gemma3_overrides(raw) -> dict:
    overrides = _gemma_overrides(raw)
    params = raw.get("rope_parameters") or {}
    if FULL in params:  # the model-level RoPE is the global one
        head_dim = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
        overrides["rope"] = RopeConfig.from_hf({**raw, "rope_parameters": params[FULL]}, head_dim)
    return overrides


GEMMA = ModelFamily(
    name="gemma", model_types=("gemma",), architectures=("GemmaForCausalLM",),
    module=GemmaForCausalLM, config_overrides=_gemma_overrides, tiny_preset="tiny-gemma",
    options=GemmaOptions,
)
GEMMA2 = ModelFamily(
    name="gemma2", model_types=("gemma2",), architectures=("Gemma2ForCausalLM",),
    cohorts=("every-dtype",),
    module=Gemma2ForCausalLM, config_overrides=_gemma_overrides, tiny_preset="tiny-gemma2",
    options=GemmaOptions,
)
GEMMA3 = ModelFamily(
    name="gemma3_text", model_types=("gemma3_text",), architectures=("Gemma3ForCausalLM",),
    module=Gemma3ForCausalLM, config_overrides=_gemma3_overrides, tiny_preset="tiny-gemma3",
    options=Gemma3Options,
)

#: what the registry reads from this module, in lookup order
FAMILIES = (GEMMA, GEMMA2, GEMMA3)

#: Gemma 3's text decoder: tiny-gemma3, and tiny-gemma3-vl's text_config
TINY_GEMMA3 = {
    **COMMON, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
    "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
    "query_pre_attn_scalar": 24, "sliding_window": 6,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
}
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-gemma": {**COMMON, "model_type": "gemma", "architectures": ["GemmaForCausalLM"],
                   "head_dim": 16, "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": True},
    "tiny-gemma2": {
        **COMMON, "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
        "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
        "query_pre_attn_scalar": 24, "sliding_window": 6, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "layer_types": ["sliding_attention", "full_attention"],
    },
    "tiny-gemma3": TINY_GEMMA3,
}
