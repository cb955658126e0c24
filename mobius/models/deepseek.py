"""DeepSeek-V2 and DeepSeek-V3: multi-head latent attention, dense then MoE layers.

Attention is MLA (mobius/components/latent_attention.py: the cache holds the
latent, one shared head of ``qk_rope_head_dim + kv_lora_rank`` features, so the
package's ``head_size`` / ``num_key_value_heads`` are that width and 1). The
first ``first_k_dense_replace`` layers have a gated MLP of
``intermediate_size``; the rest the routed experts plus shared experts of
mobius/models/deepseek_moe.py (V2: softmax greedy / group_limited_greedy;
V3: sigmoid + e_score_correction_bias + group-limited noaux_tc top-k).
The softmax scale is ``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5``, times
yarn's mscale(factor, mscale_all_dim) squared for a scaled RoPE.
V3 checkpoints' multi-token-prediction layers (``model.layers.{N..}`` beyond
``num_hidden_layers``) are not part of the causal LM and are left unread, as
transformers does; ``--mtp`` builds the first as genai's drafter (``mtp_head``:
mobius/components/mtp_head.py, its layer a decoder layer like the last one).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.latent_attention import LatentAttention
from mobius.components.mlp import GatedMLP
from mobius.components.mtp_head import MtpHead, nextn_head, nextn_tensors
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options, reject
from mobius.config.rope import RopeConfig, _yarn_mscale
from mobius.errors import ConfigError
from mobius.models.deepseek_moe import DeepseekMoE
from mobius.models.family import ModelFamily
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import COMMON

@dataclasses.dataclass(frozen=True)
class DeepseekV2Options:
    """config.json switches, with transformers' DeepseekV2Config defaults."""

    q_lora_rank: int | None = None  # null: a plain q_proj (normalize_deepseek fills 1536)
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    attention_bias: bool = False
    mlp_bias: bool = False
    first_k_dense_replace: int = 0
    n_routed_experts: int = 64
    num_experts_per_tok: int = 6
    moe_intermediate_size: int = 1407
    n_shared_experts: int = 2
    routed_scaling_factor: float = 1.0
    topk_method: str = "greedy"
    n_group: int = 1
    topk_group: int = 1
    norm_topk_prob: bool = False
    rope_interleave: bool = dataclasses.field(default=True, init=False)  # V2: always
    moe_layer_freq: int = 1
    num_nextn_predict_layers: int = 0

    def dense_layer(self, layer: int) -> bool:
        """Whether ``layer`` has the gated MLP instead of the experts."""
        return layer < self.first_k_dense_replace


@dataclasses.dataclass(frozen=True)
class DeepseekV3Options(DeepseekV2Options):
    """transformers' DeepseekV3Config defaults; routing is always noaux_tc."""

    mlp_bias: bool = dataclasses.field(default=False, init=False)  # V3's MLPs have no bias
    first_k_dense_replace: int = 3
    n_routed_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 2048
    n_shared_experts: int = 1
    routed_scaling_factor: float = 2.5
    topk_method: str = dataclasses.field(default="noaux_tc", init=False)
    n_group: int = 8
    topk_group: int = 4
    norm_topk_prob: bool = True
    rope_interleave: bool = True
    num_nextn_predict_layers: int = 1


def _check(o: DeepseekV2Options, v3: bool) -> None:
    family = "deepseek_v3" if v3 else "deepseek_v2"
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                "n_shared_experts", "n_group", "topk_group"):
        positive_int(key, getattr(o, key))
    if o.qk_rope_head_dim % 2:
        raise ConfigError(f"config.json: qk_rope_head_dim must be even, got {o.qk_rope_head_dim}")
    reject(o.topk_method not in ("greedy", "group_limited_greedy", "noaux_tc") or
           (not v3 and o.topk_method == "noaux_tc"), family, f"topk_method={o.topk_method!r}")
    reject(not v3 and o.norm_topk_prob, family,
           "norm_topk_prob=true (transformers' DeepseekV2 router never renormalizes)")
    reject(o.moe_layer_freq != 1, family, f"moe_layer_freq={o.moe_layer_freq}")
    experts, groups, top_k = o.n_routed_experts, o.n_group, o.num_experts_per_tok
    if o.topk_method == "greedy":  # n_group / topk_group are not read
        if top_k > experts:
            raise ConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds "
                              f"n_routed_experts ({experts})")
        return
    if experts % groups or o.topk_group > groups:
        raise ConfigError(f"config.json: {experts} experts do not split into n_group={groups} "
                          f"groups with topk_group={o.topk_group} of them kept")
    if top_k > (experts // groups) * o.topk_group:
        raise ConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds the experts of "
                          f"the {o.topk_group} kept groups")
    if v3 and experts // groups < 2:
        raise ConfigError("config.json: deepseek_v3 groups need at least 2 experts each")


def normalize_deepseek(raw: Mapping[str, Any]) -> dict[str, Any]:
    """q_lora_rank defaults to 1536 when config.json leaves it out; null (a plain q_proj)
    stays null."""
    return {"q_lora_rank": 1536, **raw}


def _rope(raw: Mapping[str, Any], options: DeepseekV2Options) -> RopeConfig:
    return RopeConfig.from_hf(raw, options.qk_rope_head_dim)


def softmax_scale(options: DeepseekV2Options, rope: RopeConfig) -> float:
    scale = (options.qk_nope_head_dim + options.qk_rope_head_dim) ** -0.5
    if rope.rope_type != "default" and rope.mscale_all_dim:
        scale *= _yarn_mscale(rope.factor, rope.mscale_all_dim) ** 2
    return scale


def deepseek_overrides(cls: type[DeepseekV2Options]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The config_overrides of the family whose switches are ``cls`` (checked here). The
    cache is the latent: one KV head of qk_rope_head_dim + kv_lora_rank features."""
    def overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
        options = read_options(cls, raw)
        _check(options, issubclass(cls, DeepseekV3Options))
        if options.q_lora_rank is not None:
            positive_int("q_lora_rank", options.q_lora_rank)
        return {"head_dim": options.qk_rope_head_dim + options.kv_lora_rank,
                "num_key_value_heads": 1, "rope": _rope(raw, options),
                "mlp_bias": options.mlp_bias}

    return overrides


def _mlp(config: ArchitectureConfig, o: DeepseekV2Options, layer: int):
    act, hidden = config.hidden_act, config.hidden_size
    if o.dense_layer(layer):
        return GatedMLP(hidden, config.intermediate_size, act, o.mlp_bias)
    return DeepseekMoE(hidden, o.moe_intermediate_size, o.n_routed_experts, o.num_experts_per_tok,
                       method=o.topk_method, groups=o.n_group, topk_group=o.topk_group,
                       scaling=o.routed_scaling_factor, normalize=o.norm_topk_prob,
                       shared_size=o.moe_intermediate_size * o.n_shared_experts, activation=act,
                       shared_bias=o.mlp_bias)


def _layer(config: ArchitectureConfig, i: int) -> PreNormDecoderLayer:
    """Decoder layer ``i`` (an MTP layer for i >= num_hidden_layers)."""
    o = config.options  # checked by _overrides
    eps, hidden = config.rms_norm_eps, config.hidden_size
    attention = LatentAttention(
        f"model.layers.{i}.self_attn", hidden, config.num_attention_heads,
        q_lora_rank=o.q_lora_rank, kv_lora_rank=o.kv_lora_rank, nope_dim=o.qk_nope_head_dim,
        rope_dim=o.qk_rope_head_dim, v_dim=o.v_head_dim, scale=softmax_scale(o, config.rope),
        bias=o.attention_bias, interleaved=o.rope_interleave)
    return PreNormDecoderLayer(attention, _mlp(config, o, i), RMSNorm(hidden, eps),
                               RMSNorm(hidden, eps))


class DeepseekForCausalLM(CausalLM):
    """DeepseekV2ForCausalLM / DeepseekV3ForCausalLM."""

    def __init__(self, config: ArchitectureConfig):
        layers = [_layer(config, i) for i in range(config.num_hidden_layers)]
        norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        super().__init__(config, CausalTransformer(config, layers, norm))


def mtp_head(config: ArchitectureConfig) -> MtpHead:
    return nextn_head(config, _layer(config, config.num_hidden_layers))


def mtp_layers(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    first = config.num_hidden_layers
    return tuple(IgnoredTensors(rf"model\.layers\.{first + k}\..*",
                                "multi-token-prediction layer (not used by the causal LM)")
                 for k in range(config.options.num_nextn_predict_layers))


DEEPSEEK_V2 = ModelFamily(
    name="deepseek_v2", model_types=("deepseek_v2",), architectures=("DeepseekV2ForCausalLM",),
    module=DeepseekForCausalLM, config_overrides=deepseek_overrides(DeepseekV2Options),
    options=DeepseekV2Options, normalize_raw=normalize_deepseek, tiny_preset="tiny-deepseek-v2",
    cohorts=("genai",),
    ignored_tensors=mtp_layers,
)

DEEPSEEK_V3 = ModelFamily(
    name="deepseek_v3", model_types=("deepseek_v3",), architectures=("DeepseekV3ForCausalLM",),
    module=DeepseekForCausalLM, config_overrides=deepseek_overrides(DeepseekV3Options),
    options=DeepseekV3Options, normalize_raw=normalize_deepseek, tiny_preset="tiny-deepseek-v3",
    cohorts=("genai",),
    ignored_tensors=mtp_layers, mtp_head=mtp_head, mtp_tensors=nextn_tensors,
)

FAMILIES = (DEEPSEEK_V2, DEEPSEEK_V3)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # MLA: cache head = qk_rope_head_dim + kv_lora_rank = 32 (V2) / 48 (V3); every
    # latent, head and expert size distinct. V2-Lite-like: no q LoRA, greedy routing.
    "tiny-deepseek-v2": {
        **COMMON, "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
        "num_key_value_heads": 4, "q_lora_rank": None, "kv_lora_rank": 24,
        "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 20,
        "first_k_dense_replace": 1, "moe_intermediate_size": 28, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "n_shared_experts": 2, "topk_method": "greedy",
        "n_group": 4, "topk_group": 2, "routed_scaling_factor": 1.0, "norm_topk_prob": False,
    },
    # V3-like: q LoRA, sigmoid + correction bias + group-limited (noaux_tc) routing.
    "tiny-deepseek-v3": {
        **COMMON, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
        "num_key_value_heads": 4, "q_lora_rank": 36, "kv_lora_rank": 40,
        "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 20,
        "first_k_dense_replace": 1, "moe_intermediate_size": 28, "n_routed_experts": 8,
        "num_experts_per_tok": 3, "n_shared_experts": 1, "n_group": 4, "topk_group": 2,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "rope_interleave": True,
        "num_nextn_predict_layers": 0,
    },
}
