"""Qwen3-MoE and Qwen2-MoE: Qwen3 / Qwen2 attention with sparse mixture-of-experts MLPs.

Routing: softmax over ``num_experts`` -> top ``num_experts_per_tok``,
renormalized only when ``norm_topk_prob``. Layer i is sparse unless it is in
``mlp_only_layers`` or ``(i + 1) % decoder_sparse_step != 0``; the dense ones
keep a plain gated MLP of ``intermediate_size`` (experts use
``moe_intermediate_size``). Qwen2-MoE adds an always-on shared expert scaled
by sigmoid(shared_expert_gate(x)). Checkpoint names:
``layers.{i}.mlp.gate.weight``, ``layers.{i}.mlp.experts.{j}.{gate,up,down}_proj.weight``
(+ ``mlp.shared_expert.*``, ``mlp.shared_expert_gate.weight``).
"""

from __future__ import annotations

import dataclasses

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.moe import SparseMoE
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.models.mixtral import moe_int
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class QwenMoeOptions:
    # no default for the sizes and counts: moe_int rejects a missing one
    num_experts: int | None = None
    num_local_experts: int | None = None  # transformers 5's spelling of num_experts
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int | None = None  # Qwen2-MoE only
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    norm_topk_prob: bool = False


def is_sparse_layer(config: ArchitectureConfig, layer: int) -> bool:
    """transformers' rule: not in mlp_only_layers, and (layer + 1) % decoder_sparse_step == 0."""
    o = config.options
    step = moe_int("decoder_sparse_step", o.decoder_sparse_step)
    return layer not in o.mlp_only_layers and (layer + 1) % step == 0


def moe_mlp(config: ArchitectureConfig, layer: int, shared_expert: bool):
    """Layer i's feed-forward: sparse experts (+ the shared expert) or the dense MLP."""
    if not is_sparse_layer(config, layer):
        return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
    o = config.options
    experts = moe_int("num_experts", o.num_experts, alias=o.num_local_experts)
    top_k = moe_int("num_experts_per_tok", o.num_experts_per_tok)
    if top_k > experts:
        raise ConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds "
                          f"num_experts ({experts})")
    shared = (moe_int("shared_expert_intermediate_size", o.shared_expert_intermediate_size)
              if shared_expert else None)
    inter = moe_int("moe_intermediate_size", o.moe_intermediate_size)
    return SparseMoE(config.hidden_size, inter, experts, top_k, normalize_top_k=o.norm_topk_prob,
                     activation=config.hidden_act, shared_expert_size=shared)


class QwenMoeForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig, *, shared_expert: bool = False):
        eps = config.rms_norm_eps
        layers = [
            PreNormDecoderLayer(llama_attention(config), moe_mlp(config, i, shared_expert),
                                RMSNorm(config.hidden_size, eps), RMSNorm(config.hidden_size, eps))
            for i in range(config.num_hidden_layers)
        ]
        super().__init__(config, CausalTransformer(config, layers, RMSNorm(config.hidden_size, eps)))


class Qwen2MoeForCausalLM(QwenMoeForCausalLM):
    def __init__(self, config: ArchitectureConfig):
        super().__init__(config, shared_expert=True)


QWEN3_MOE = ModelFamily(
    name="qwen3_moe", cohorts=("every-dtype",),
    model_types=("qwen3_moe",),
    architectures=("Qwen3MoeForCausalLM",),
    module=QwenMoeForCausalLM,
    config_overrides=lambda raw: {"qk_norm": True},
    tiny_preset="tiny-qwen3-moe",
    options=QwenMoeOptions,
)

QWEN2_MOE = ModelFamily(
    name="qwen2_moe", cohorts=("every-dtype",),
    model_types=("qwen2_moe",),
    architectures=("Qwen2MoeForCausalLM",),
    module=Qwen2MoeForCausalLM,
    config_overrides=lambda raw: {"qkv_bias": bool(raw.get("qkv_bias", True)), "o_bias": False},
    tiny_preset="tiny-qwen2-moe",
    options=QwenMoeOptions,
)

#: what the registry reads from this module, in lookup order
FAMILIES = (QWEN3_MOE, QWEN2_MOE)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-qwen3-moe": {
        **COMMON, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 80, "head_dim": 16, "moe_intermediate_size": 40, "num_experts": 6,
        "num_experts_per_tok": 2, "norm_topk_prob": False, "mlp_only_layers": [1],
        "tie_word_embeddings": True,
    },
    "tiny-qwen2-moe": {
        **COMMON, "model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"],
        "hidden_size": 48, "head_dim": 16, "moe_intermediate_size": 36, "num_experts": 5,
        "num_experts_per_tok": 3, "norm_topk_prob": True, "shared_expert_intermediate_size": 52,
        "decoder_sparse_step": 1, "use_sliding_window": False,
    },
}
