"""GLM-4-MoE (GLM-4.5 / 4.6): dense then MoE layers with DeepSeek-V3 routing.

Attention: bias on q/k/v when ``attention_bias`` (never on o), per-head RMS
norms of q and k before RoPE when ``use_qk_norm``, RoPE on the first
``partial_rotary_factor`` (default 0.5) of each head, rotate-half (not
interleaved); head_dim defaults to hidden_size / num_attention_heads. The
first ``first_k_dense_replace`` layers have a gated MLP of
``intermediate_size``; the others DeepSeek-V3's routed experts (sigmoid
scores, ``e_score_correction_bias`` for the choice, ``topk_group`` of
``n_group`` groups, ``norm_topk_prob``, ``routed_scaling_factor``) plus a
shared gated MLP of moe_intermediate_size * ``n_shared_experts``; no MLP has a
bias. The routing is built in the fusable form of
mobius/components/chosen_routing.py (weights sigmoid(s) = exp(-softplus(-s))).
The ``num_nextn_predict_layers`` multi-token-prediction layers after
``num_hidden_layers`` are left unread, as transformers does; ``--mtp`` builds
the first as genai's drafter (DeepSeek-V3's layout: ``mtp_head``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.mtp_head import MtpHead, nextn_head, nextn_tensors
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.config.rope import with_partial_rotary_default
from mobius.errors import ConfigError
from mobius.models.deepseek_moe import DeepseekMoE
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class Glm4MoeOptions:
    """config.json switches, with transformers' Glm4MoeConfig defaults."""

    attention_bias: bool = False
    use_qk_norm: bool = False
    tie_word_embeddings: bool = False
    first_k_dense_replace: int = 1
    moe_intermediate_size: int = 1408
    n_routed_experts: int = 128
    num_experts_per_tok: int = 8
    n_shared_experts: int = 1
    routed_scaling_factor: float = 1.0
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = True
    num_nextn_predict_layers: int = 1


def _options(raw: Mapping[str, Any]) -> Glm4MoeOptions:
    o = read_options(Glm4MoeOptions, raw)
    for key in ("moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
                "n_shared_experts", "n_group", "topk_group"):
        positive_int(key, getattr(o, key))
    if o.first_k_dense_replace < 0 or o.num_nextn_predict_layers < 0:
        raise ConfigError("config.json: first_k_dense_replace and num_nextn_predict_layers "
                          f"must be >= 0, got {o.first_k_dense_replace} and "
                          f"{o.num_nextn_predict_layers}")
    experts, groups = o.n_routed_experts, o.n_group
    if experts % groups or o.topk_group > groups or experts // groups < 2:
        raise ConfigError(f"config.json: {experts} experts do not split into n_group={groups} "
                          f"groups of at least 2 with topk_group={o.topk_group} of them kept")
    if o.num_experts_per_tok > (experts // groups) * o.topk_group:
        raise ConfigError(f"config.json: num_experts_per_tok ({o.num_experts_per_tok}) exceeds "
                          f"the experts of the {o.topk_group} kept groups")
    return o


class Glm4MoE(DeepseekMoE):
    """DeepSeek-V3's noaux_tc MoE, its routing in the form com.microsoft MoE fuses."""

    def __init__(self, hidden: int, o: Glm4MoeOptions, activation: str):
        super().__init__(hidden, o.moe_intermediate_size, o.n_routed_experts,
                         o.num_experts_per_tok, method="noaux_tc", groups=o.n_group,
                         topk_group=o.topk_group, scaling=o.routed_scaling_factor,
                         normalize=o.norm_topk_prob,
                         shared_size=o.moe_intermediate_size * o.n_shared_experts,
                         activation=activation)


def _layer(config: ArchitectureConfig, i: int) -> PreNormDecoderLayer:
    """Decoder layer ``i`` (an MTP layer for i >= num_hidden_layers)."""
    o = config.options  # checked by _overrides
    eps, hidden, act = config.rms_norm_eps, config.hidden_size, config.hidden_act
    mlp = (GatedMLP(hidden, config.intermediate_size, act)
           if i < o.first_k_dense_replace else Glm4MoE(hidden, o, act))
    return PreNormDecoderLayer(llama_attention(config), mlp, RMSNorm(hidden, eps),
                               RMSNorm(hidden, eps))


class Glm4MoeForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [_layer(config, i) for i in range(config.num_hidden_layers)]
        norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        super().__init__(config, CausalTransformer(config, layers, norm))


def _mtp_head(config: ArchitectureConfig) -> MtpHead:
    return nextn_head(config, _layer(config, config.num_hidden_layers))


def normalize_glm4_moe(raw: Mapping[str, Any]) -> dict[str, Any]:
    """partial_rotary_factor defaults to 0.5, not 1."""
    return with_partial_rotary_default(raw, 0.5)


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    o = _options(raw)
    return {"qkv_bias": o.attention_bias, "o_bias": False, "mlp_bias": False,
            "qk_norm": o.use_qk_norm, "tie_word_embeddings": o.tie_word_embeddings}


def _mtp_layers(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    first = config.num_hidden_layers
    return tuple(IgnoredTensors(rf"model\.layers\.{first + k}\..*",
                                "multi-token-prediction layer (not used by the causal LM)")
                 for k in range(config.options.num_nextn_predict_layers))


FAMILY = ModelFamily(
    name="glm4_moe", model_types=("glm4_moe",), architectures=("Glm4MoeForCausalLM",),
    module=Glm4MoeForCausalLM, tiny_preset="tiny-glm4_moe", normalize_raw=normalize_glm4_moe,
    cohorts=("genai", "every-dtype"), options=Glm4MoeOptions,
    config_overrides=_overrides, ignored_tensors=_mtp_layers, mtp_head=_mtp_head,
    mtp_tensors=nextn_tensors,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # GLM-4.5-like MoE: layer 0 dense, layer 1 top-2 of 8 (sigmoid + correction bias, 2 of 4
    # groups kept, renormalized, scaled 2.5) + a shared expert; qk norm, q/k/v bias, RoPE on
    # half of each 32-wide head.
    "tiny-glm4_moe": {
        **COMMON, "model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"],
        "head_dim": 32, "rms_norm_eps": 1e-5, "attention_bias": True, "use_qk_norm": True,
        "partial_rotary_factor": 0.5, "first_k_dense_replace": 1, "moe_intermediate_size": 20,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 4,
        "topk_group": 2, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
        "num_nextn_predict_layers": 0,
    },
}
