"""OLMoE: pre-norm decoder with OLMo-2-style QK norm and a sparse mixture of SiLU-gated experts.

Attention norms the whole query and key projections (not per head) before
RoPE. Routing: softmax over ``num_experts`` -> top ``num_experts_per_tok``,
renormalized only when ``norm_topk_prob``. Each expert has
``intermediate_size`` features. Checkpoint names:
``layers.{i}.mlp.gate.weight`` and ``layers.{i}.mlp.experts.{j}.{gate,up,down}_proj.weight``.
``clip_qkv`` (clamping q/k/v) is not built: a config that sets it is rejected.
"""

from __future__ import annotations

import dataclasses

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.moe import SparseMoE
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.models.mixtral import moe_int
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class OlmoeOptions:
    num_experts: int | None = None  # 64 when neither spelling is set
    num_local_experts: int | None = None  # transformers 5's spelling of num_experts
    num_experts_per_tok: int = 8
    norm_topk_prob: bool = False
    clip_qkv: float | None = None


def _moe(config: ArchitectureConfig) -> SparseMoE:
    o = config.options
    experts = moe_int("num_experts", o.num_experts, 64, alias=o.num_local_experts)
    top_k = moe_int("num_experts_per_tok", o.num_experts_per_tok)
    if top_k > experts:
        raise ConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds "
                          f"num_experts ({experts})")
    return SparseMoE(config.hidden_size, config.intermediate_size, experts, top_k,
                     normalize_top_k=o.norm_topk_prob,
                     activation=config.hidden_act)


class OlmoeForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        if config.options.clip_qkv is not None:
            raise ConfigError(f"config.json: clip_qkv={config.options.clip_qkv!r} is not "
                              "supported for olmoe (only null)")
        eps = config.rms_norm_eps
        q_size = config.num_attention_heads * config.head_dim
        kv_size = config.num_key_value_heads * config.head_dim
        layers = [
            PreNormDecoderLayer(
                llama_attention(config, q_norm=RMSNorm(q_size, eps), k_norm=RMSNorm(kv_size, eps),
                                qk_norm_per_head=False),
                _moe(config), RMSNorm(config.hidden_size, eps), RMSNorm(config.hidden_size, eps))
            for _ in range(config.num_hidden_layers)
        ]
        super().__init__(config, CausalTransformer(config, layers, RMSNorm(config.hidden_size, eps)))


FAMILY = ModelFamily(
    name="olmoe", model_types=("olmoe",), architectures=("OlmoeForCausalLM",),
    cohorts=("every-dtype",),
    module=OlmoeForCausalLM, tiny_preset="tiny-olmoe", options=OlmoeOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-olmoe": {
        **COMMON, "model_type": "olmoe", "architectures": ["OlmoeForCausalLM"],
        "intermediate_size": 44, "num_experts": 5, "num_experts_per_tok": 2,
        "norm_topk_prob": False, "rms_norm_eps": 1e-5, "clip_qkv": None,
    },
}
