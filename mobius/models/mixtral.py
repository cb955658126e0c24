"""Mixtral: the Mistral decoder with a sparse mixture of SiLU-gated experts as its MLP.

Routing: softmax over ``num_local_experts`` -> top ``num_experts_per_tok`` ->
always renormalized. Checkpoint names (what transformers' save_pretrained and
the hub use): ``layers.{i}.block_sparse_moe.gate.weight`` (the router) and
``layers.{i}.block_sparse_moe.experts.{j}.w1/w3/w2.weight`` (gate/up/down).
"""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.moe import MIXTRAL_EXPERT_NAMES, SparseMoE
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class MixtralOptions:
    num_local_experts: int | None = None  # no default: moe_int rejects a missing count
    num_experts_per_tok: int | None = None


def moe_int(key: str, value: int | None, default: int | None = None, *,
            alias: int | None = None) -> int:
    """A positive integer MoE field of config.json (ConfigError if missing or invalid).

    ``value``: the field as the family's options read it; ``alias``: another spelling
    of the same field (transformers 5 writes Qwen-MoE's ``num_experts`` as
    ``num_local_experts``).
    """
    if value is None:
        value = alias
    if value is None:
        value = default
    if value is None or value <= 0:
        raise ConfigError(f"config.json: {key!r} must be a positive integer, got {value!r}")
    return value


class MixtralDecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + moe(norm(x)); the MoE is named ``block_sparse_moe``."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        o = config.options
        experts = moe_int("num_local_experts", o.num_local_experts)
        top_k = moe_int("num_experts_per_tok", o.num_experts_per_tok)
        if top_k > experts:
            raise ConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds "
                              f"num_local_experts ({experts})")
        self.self_attn = llama_attention(config)
        self.block_sparse_moe = SparseMoE(
            config.hidden_size, config.intermediate_size, experts, top_k,
            normalize_top_k=True, activation=config.hidden_act, expert_names=MIXTRAL_EXPERT_NAMES)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        attn, present_key, present_value = self.self_attn(
            op, self.input_layernorm(op, hidden), cos, sin, mask, past_key, past_value
        )
        hidden = op.Add(hidden, attn)
        hidden = op.Add(hidden, self.block_sparse_moe(op, self.post_attention_layernorm(op, hidden)))
        return hidden, present_key, present_value


class MixtralForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        model = CausalTransformer(
            config,
            [MixtralDecoderLayer(config) for _ in range(config.num_hidden_layers)],
            RMSNorm(config.hidden_size, config.rms_norm_eps),
        )
        super().__init__(config, model)


FAMILY = ModelFamily(
    name="mixtral", cohorts=("every-dtype",),
    model_types=("mixtral",),
    architectures=("MixtralForCausalLM",),
    module=MixtralForCausalLM,
    tiny_preset="tiny-mixtral",
    options=MixtralOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # MoE: expert sizes, expert counts and hidden sizes differ from every other dim.
    "tiny-mixtral": {**COMMON, "model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
                     "intermediate_size": 88, "num_local_experts": 4, "num_experts_per_tok": 2},
}
