"""GLM-4-MoE-Lite (GLM-4.7-Flash): DeepSeek-V3's latent attention and routing in GLM's layout.

transformers builds it from DeepseekV3Attention (MLA, interleaved RoPE by
``rope_interleave``, softmax scale (qk_nope + qk_rope) ** -0.5 times yarn's
mscale squared) and GLM-4-MoE's noaux_tc experts (sigmoid scores,
``e_score_correction_bias``, ``topk_group`` of ``n_group`` groups,
``norm_topk_prob``, ``routed_scaling_factor``, a shared gated MLP of
moe_intermediate_size * ``n_shared_experts``): mobius/models/deepseek.py's
model with these defaults. Which layers are dense is ``mlp_layer_types``
("dense" / "sparse" per layer; default: layer 0 dense), not
first_k_dense_replace, which transformers does not read here.

The ``num_nextn_predict_layers`` multi-token-prediction layers after
``num_hidden_layers`` are left unread, as transformers does; ``--mtp`` builds
the first as genai's drafter (DeepSeek-V3's layout: deepseek.mtp_head). Its
attention is the decoders' MLA and its MLP is always the routed experts:
``mlp_layer_types`` names only the decoder layers, and GLM-4.7-Flash's MTP
layer 47 ships routed and shared experts (and its own embed_tokens), as the
engines that draft with it expect (they read ``first_k_dense_replace``, 1
there: layer 47 is past the dense one). An MTP layer with a dense MLP is
refused when its tensors are read (its experts are missing).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.mtp_head import nextn_tensors
from mobius.errors import ConfigError
from mobius.models.deepseek import DeepseekForCausalLM, DeepseekV3Options, deepseek_overrides
from mobius.models.deepseek import mtp_head, mtp_layers
from mobius.models.family import ModelFamily
from mobius.tiny.bases import COMMON

LAYER_KINDS = ("dense", "sparse")


@dataclasses.dataclass(frozen=True)
class Glm4MoeLiteOptions(DeepseekV3Options):
    """transformers' Glm4MoeLiteConfig defaults (q_lora_rank 768: normalize_glm4_moe_lite)."""

    first_k_dense_replace: int = dataclasses.field(default=1, init=False)  # not read
    mlp_layer_types: tuple[str, ...] | None = None
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 192
    qk_rope_head_dim: int = 64
    v_head_dim: int = 256
    n_routed_experts: int = 64
    num_experts_per_tok: int = 4
    moe_intermediate_size: int = 1536
    n_shared_experts: int = 1
    routed_scaling_factor: float = 1.8
    n_group: int = 1
    topk_group: int = 1
    num_nextn_predict_layers: int = 1

    def dense_layer(self, layer: int) -> bool:
        """Decoder layer ``layer``'s kind; the MTP layers past mlp_layer_types are sparse."""
        if self.mlp_layer_types is None:
            return layer == 0
        return layer < len(self.mlp_layer_types) and self.mlp_layer_types[layer] == "dense"


def normalize_glm4_moe_lite(raw: Mapping[str, Any]) -> dict[str, Any]:
    """q_lora_rank defaults to 768 when config.json leaves it out (null: a plain q_proj)."""
    return {"q_lora_rank": 768, **raw}


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = deepseek_overrides(Glm4MoeLiteOptions)(raw)
    kinds = raw.get("mlp_layer_types")
    layers = raw.get("num_hidden_layers")
    if kinds is not None and (len(kinds) != layers or not set(kinds) <= set(LAYER_KINDS)):
        raise ConfigError(f"config.json: mlp_layer_types must name 'dense' or 'sparse' for each "
                          f"of the {layers} layers, got {kinds!r}")
    return out


FAMILY = ModelFamily(
    name="glm4_moe_lite", model_types=("glm4_moe_lite",),
    architectures=("Glm4MoeLiteForCausalLM",), module=DeepseekForCausalLM,
    config_overrides=_overrides, options=Glm4MoeLiteOptions,
    normalize_raw=normalize_glm4_moe_lite, tiny_preset="tiny-glm4_moe_lite",
    cohorts=("genai",), ignored_tensors=mtp_layers, mtp_head=mtp_head,
    mtp_tensors=nextn_tensors,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # GLM-4.7-Flash-like: q LoRA, cache head qk_rope + kv_lora = 8 + 40; layers 0 and 2
    # sparse, 1 dense; top-3 of 8 in 2 of 4 groups, renormalized, scaled 1.8; q/kv/o biases.
    "tiny-glm4_moe_lite": {
        **COMMON, "model_type": "glm4_moe_lite", "architectures": ["Glm4MoeLiteForCausalLM"],
        "num_hidden_layers": 3, "num_key_value_heads": 4, "q_lora_rank": 36,
        "kv_lora_rank": 40, "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 20,
        "mlp_layer_types": ["sparse", "dense", "sparse"], "moe_intermediate_size": 28,
        "n_routed_experts": 8, "num_experts_per_tok": 3, "n_shared_experts": 1, "n_group": 4,
        "topk_group": 2, "routed_scaling_factor": 1.8, "norm_topk_prob": True,
        "rope_interleave": True, "attention_bias": True, "num_nextn_predict_layers": 0,
    },
}
