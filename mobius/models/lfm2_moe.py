"""LFM2-MoE: LFM2's hybrid conv / attention stack with sparse experts after the first layers.

The first ``num_dense_layers`` layers keep a SwiGLU feed-forward of
``intermediate_size`` (as written: no LFM2 width adjustment); every later one
routes each token to ``num_experts_per_tok`` of ``num_experts`` SwiGLU experts
(``experts.{j}.w1/w3/w2``). Routing, as transformers' Lfm2MoeTopKRouter, in
float32: p = sigmoid(gate(x)); the experts are chosen by the top-k of
p + ``expert_bias`` (``use_expert_bias``) or of p, weighted by p, divided by
(their sum + 1e-6) when ``norm_topk_prob``, times ``routed_scaling_factor``.
A sigmoid, bias-chosen routing is not the softmax top-k of com.microsoft MoE, so
it stays decomposed on every EP (as DeepSeek-V3's).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

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


def _f32(op, value: float):
    return op.Constant(value=ir.tensor(np.array(value, dtype=np.float32)))


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

    def _routing(self, op, logits):
        if self.dtype != F32:
            logits = op.Cast(logits, to=F32)
        probs = op.Sigmoid(logits)
        choice = op.Add(probs, self.expert_bias) if self.expert_bias is not None else probs
        top, _ = op.TopK(choice, op.Constant(value_ints=[self.top_k]), axis=-1, _outputs=2)
        kth = op.ReduceMin(top, op.Constant(value_ints=[-1]), keepdims=1)
        weights = op.Where(op.GreaterOrEqual(choice, kth), probs, _f32(op, 0.0))
        if self.o.norm_topk_prob:
            total = op.ReduceSum(weights, op.Constant(value_ints=[-1]), keepdims=1)
            weights = op.Div(weights, op.Add(total, _f32(op, 1e-6)))
        if self.o.routed_scaling_factor != 1.0:
            weights = op.Mul(weights, _f32(op, self.o.routed_scaling_factor))
        return weights

    def forward(self, op, x):
        return combine_experts(op, x, self._routing(op, self.gate(op, x)), list(self.experts),
                               self.dtype)


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
)
