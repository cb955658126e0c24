"""LFM2-MoE: LFM2's hybrid conv / attention stack with sparse experts after the first layers.

The first ``num_dense_layers`` layers keep a SwiGLU feed-forward of
``intermediate_size`` (as written: no LFM2 width adjustment); every later one
routes each token to ``num_experts_per_tok`` of ``num_experts`` SwiGLU experts
(``experts.{j}.w1/w3/w2``). Routing, as transformers' Lfm2MoeTopKRouter, in
float32: p = sigmoid(gate(x)); the experts are chosen by the top-k of
p + ``expert_bias`` (``use_expert_bias``) or of p, weighted by p, divided by
(their sum + 1e-6) when ``norm_topk_prob``, times ``routed_scaling_factor``.
The routing is built in the fusable form of mobius/components/chosen_routing.py
(weights sigmoid(s) = exp(-softplus(-s))): an EP with the MoE kernel runs it as
com.microsoft MoE, every other EP runs the same math in standard ops.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components import chosen_routing as cr
from mobius.components.linear import Linear
from mobius.components.moe import MIXTRAL_EXPERT_NAMES, GatedExpert, combine_experts
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.lfm2 import Lfm2ForCausalLM, feed_forward, normalize_hybrid
from mobius.tiny.bases import COMMON

F32 = ir.DataType.FLOAT


@dataclasses.dataclass(frozen=True)
class Lfm2MoeOptions:
    """config.json switches, with transformers' Lfm2MoeConfig defaults."""

    num_dense_layers: int = 2
    num_experts: int = 32
    num_experts_per_tok: int = 4
    moe_intermediate_size: int = 1792
    use_expert_bias: bool = True
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = True


def moe_options(config_or_raw) -> Lfm2MoeOptions:
    raw = getattr(config_or_raw, "raw", config_or_raw)
    o = read_options(Lfm2MoeOptions, raw)
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        positive_int(key, getattr(o, key))
    if o.num_experts_per_tok > o.num_experts:
        raise ConfigError(f"config.json: num_experts_per_tok ({o.num_experts_per_tok}) exceeds "
                          f"num_experts ({o.num_experts})")
    if o.num_dense_layers < 0:
        raise ConfigError(f"config.json: num_dense_layers must be >= 0, got {o.num_dense_layers}")
    return o


class Lfm2MoeBlock(nn.Module):
    """Router ``gate`` (+ float32 ``expert_bias``) and ``experts.{j}`` (w1, w3, w2)."""

    def __init__(self, hidden: int, o: Lfm2MoeOptions):
        super().__init__()
        self.top_k, self.o = o.num_experts_per_tok, o
        self.dtype = get_build_dtype()
        self.gate = Linear(hidden, o.num_experts)
        # float32 in every build (transformers keeps it in the model dtype): it decides expert
        # choices, and a Cast of it to the float32 routing would be folded to float32 anyway
        self.expert_bias = Weight([o.num_experts], dtype=F32) if o.use_expert_bias else None
        self.experts = nn.ModuleList([
            GatedExpert(hidden, o.moe_intermediate_size, "silu", MIXTRAL_EXPERT_NAMES)
            for _ in range(o.num_experts)])

    def forward(self, op, x):
        logits = self.gate(op, x)
        logits32 = logits if self.dtype == F32 else op.Cast(logits, to=F32)
        probs = op.Sigmoid(logits32)
        choice = op.Add(probs, self.expert_bias) if self.expert_bias is not None else probs
        chosen = op.GreaterOrEqual(choice, cr.kth_largest(op, choice, self.top_k))
        log_probs = op.Neg(op.Softplus(op.Neg(logits32)))  # log sigmoid, finite
        if self.dtype != F32:
            log_probs = op.Cast(log_probs, to=self.dtype)
        routing = cr.chosen_routing(op, log_probs, chosen, self.top_k, self.dtype)
        out = combine_experts(op, x, routing, list(self.experts), self.dtype)
        factor = cr.chosen_sum(op, probs, chosen)  # routing is p / factor
        if self.o.norm_topk_prob:
            factor = op.Div(factor, op.Add(factor, cr.constant(op, 1e-6)))
        if self.o.routed_scaling_factor != 1.0:
            factor = op.Mul(factor, cr.constant(op, self.o.routed_scaling_factor))
        return cr.scale_tokens(op, out, factor, self.dtype)


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    moe_options(raw)
    return {"qk_norm": True}


class Lfm2MoeForCausalLM(Lfm2ForCausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = moe_options(config)
        mlps = [feed_forward(config, i) if i < o.num_dense_layers
                else Lfm2MoeBlock(config.hidden_size, o)
                for i in range(config.num_hidden_layers)]
        super().__init__(config, mlps)


FAMILY = ModelFamily(
    name="lfm2_moe",
    model_types=("lfm2_moe",),
    architectures=("Lfm2MoeForCausalLM",),
    module=Lfm2MoeForCausalLM,
    normalize_raw=normalize_hybrid,
    config_overrides=_overrides,
    tiny_preset="tiny-lfm2-moe",
    cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # LFM2-MoE: a dense first layer (intermediate_size as written), then 6 experts of 28,
    # top-2 chosen on sigmoid + expert_bias, renormalized, scaled by 1.5.
    "tiny-lfm2-moe": {
        **COMMON, "model_type": "lfm2_moe", "architectures": ["Lfm2MoeForCausalLM"],
        "num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"],
        "conv_L_cache": 3, "conv_bias": False, "norm_eps": 1e-5, "num_dense_layers": 1,
        "num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 28,
        "use_expert_bias": True, "routed_scaling_factor": 1.5, "norm_topk_prob": True,
    },
}
