"""HunYuan MoE (Hunyuan-A13B): HunYuan dense's attention with a mixture of experts.

Attention is hunyuan_v1_dense's (per-head QK RMSNorm after RoPE, bias on
q/k/v/o when ``attention_bias``; RoPE "dynamic" with a fixed alpha is a
stretched base). Every layer's MLP is softmax top-``moe_topk`` routing over
``num_experts`` experts, always renormalized, plus an always-on ungated
``shared_mlp``; experts and shared MLP all have ``intermediate_size``
(transformers reads no moe_intermediate_size / num_shared_expert). ``moe_topk``
may be a list, one per layer. Checkpoint names: ``mlp.gate.wg.weight``,
``mlp.experts.{j}.{gate,up,down}_proj.weight``, ``mlp.shared_mlp.*``. The routed
part is mobius/components/moe.py's pattern, so it fuses into com.microsoft MoE.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.moe import GatedExpert, combine_experts, routing_weights
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.hunyuan_v1_dense import normalize_hunyuan
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class HunYuanMoeOptions:
    """config.json switches, with transformers' HunYuanMoEV1Config defaults."""

    num_experts: int = 1
    moe_topk: int | tuple[int, ...] = 1


def top_k(o: HunYuanMoeOptions, layer: int) -> int:
    """Layer ``layer``'s number of routed experts (moe_topk, or its entry for the layer)."""
    return o.moe_topk[layer] if isinstance(o.moe_topk, tuple) else o.moe_topk


def _checked(raw: Mapping[str, Any]) -> dict[str, Any]:
    """config_overrides: the expert counts checked before any weight is read."""
    o = read_options(HunYuanMoeOptions, raw)
    layers = positive_int("num_hidden_layers", raw.get("num_hidden_layers"))
    positive_int("num_experts", o.num_experts)
    if isinstance(o.moe_topk, tuple) and len(o.moe_topk) < layers:
        raise ConfigError(f"config.json: moe_topk lists {len(o.moe_topk)} values for "
                          f"{layers} layers")
    for layer in range(layers):
        if not 0 < top_k(o, layer) <= o.num_experts:
            raise ConfigError(f"config.json: moe_topk must be in 1..num_experts "
                              f"({o.num_experts}), got {top_k(o, layer)}")
    return {}


class HunYuanRouter(nn.Module):
    """``gate.wg``: the router's one Linear, under HunYuan's name."""

    def __init__(self, hidden: int, experts: int):
        super().__init__()
        self.wg = Linear(hidden, experts)


class HunYuanMoE(nn.Module):
    """Routed experts (renormalized softmax top-k) + the ungated ``shared_mlp``."""

    def __init__(self, hidden: int, inter: int, experts: int, top_k: int, activation: str):
        super().__init__()
        self.top_k = top_k
        self.dtype = get_build_dtype()
        self.gate = HunYuanRouter(hidden, experts)
        self.experts = nn.ModuleList([GatedExpert(hidden, inter, activation)
                                      for _ in range(experts)])
        self.shared_mlp = GatedMLP(hidden, inter, activation)

    def forward(self, op, x):
        routing = routing_weights(op, self.gate.wg(op, x), self.top_k, True, self.dtype)
        routed = combine_experts(op, x, routing, list(self.experts), self.dtype)
        return op.Add(routed, self.shared_mlp(op, x))


class HunYuanMoEV1ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        d, eps, hidden = config.head_dim, config.rms_norm_eps, config.hidden_size
        layers = [
            PreNormDecoderLayer(
                llama_attention(config, q_norm=RMSNorm(d, eps), k_norm=RMSNorm(d, eps),
                                qk_norm_names=("query_layernorm", "key_layernorm"),
                                qk_norm_after_rope=True),
                HunYuanMoE(hidden, config.intermediate_size, config.options.num_experts,
                           top_k(config.options, i), config.hidden_act),
                RMSNorm(hidden, eps), RMSNorm(hidden, eps))
            for i in range(config.num_hidden_layers)
        ]
        super().__init__(config, CausalTransformer(config, layers, RMSNorm(hidden, eps)))


FAMILY = ModelFamily(
    name="hunyuan_v1_moe", model_types=("hunyuan_v1_moe",),
    architectures=("HunYuanMoEV1ForCausalLM",), module=HunYuanMoEV1ForCausalLM,
    tiny_preset="tiny-hunyuan_v1_moe", normalize_raw=normalize_hunyuan,
    cohorts=("genai",), options=HunYuanMoeOptions, config_overrides=_checked,
    attention_traits=("qk_norm_after_rope",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # top-2 of 5 experts (+ the shared MLP) of width 40 on every layer, q/k/v/o biases
    "tiny-hunyuan_v1_moe": {**COMMON, "model_type": "hunyuan_v1_moe",
                            "architectures": ["HunYuanMoEV1ForCausalLM"], "head_dim": 16,
                            "intermediate_size": 40, "rms_norm_eps": 1e-5,
                            "attention_bias": True, "num_experts": 5, "moe_topk": 2},
}
