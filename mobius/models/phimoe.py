"""PhiMoE (Phi-3.5-MoE): Phi-3-style attention with biases and LayerNorms, top-2 SparseMixer routing.

SparseMixer at inference, on router logits s [..., E] (float32), twice:

    m     = max(s); j = argmax(s)
    keep  = (m - s) / max(|s|, m) <= 2 * router_jitter_noise
    w     = softmax(s where keep, -inf elsewhere)[j]

the second round on s with expert j1 set to -inf (its threshold still uses
|s|). Routing is w1 at j1, w2 at j2, zero elsewhere; the experts are
Mixtral's (``block_sparse_moe.experts.{j}.w1/w3/w2``). ``input_jitter_noise``
and the sampling of SparseMixer only act in training. LongRoPE scales cos/sin
by ``short_mscale`` / ``long_mscale``; only equal values are built (they are
equal in the published checkpoints), as the single attention factor.

The routing is built in the fusable form of mobius/components/chosen_routing.py,
so an EP with the com.microsoft MoE kernel runs it fused.

The threshold is a hard cut: in f16/bf16 graphs, two EP graphs that round at
different points can keep a different set of logits for a token whose ratio
lies within rounding of 2 * router_jitter_noise (seen on the tiny checkpoint:
cuda/dml/webgpu f16 vs the default f16 graph, 0.03 logits apart).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import chosen_routing as cr
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.layer_norm import LayerNorm
from mobius.components.moe import MIXTRAL_EXPERT_NAMES, SparseMoE, combine_experts
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.models.mixtral import moe_int
from mobius.tiny.bases import COMMON

F32 = ir.DataType.FLOAT


@dataclasses.dataclass(frozen=True)
class PhimoeOptions:
    num_local_experts: int = 16
    num_experts_per_tok: int = 2
    router_jitter_noise: float = 0.01
    lm_head_bias: bool = False


def _f32(op, value: float):
    return op.Constant(value=ir.tensor(np.array(value, dtype=np.float32)))


def _sparsemixer_round(op, scores, candidates, experts: int, eps2):
    """One SparseMixer pick: (one-hot of the argmax of ``candidates`` [..., E] bool,
    its softmax weight among the logits within the jitter threshold [..., 1])."""
    last = op.Constant(value_ints=[-1])
    top = op.ReduceMax(candidates, last, keepdims=1)
    index = op.ArgMax(candidates, axis=-1, keepdims=1)
    arange = op.Range(op.Constant(value_int=0), op.Constant(value_int=experts),
                      op.Constant(value_int=1))
    onehot = op.Equal(op.Cast(arange, to=ir.DataType.INT64), index)
    factor = op.Max(op.Abs(scores), top)
    masked = op.Greater(op.Div(op.Sub(top, scores), factor), eps2)
    probs = op.Softmax(op.Where(masked, _f32(op, float("-inf")), candidates), axis=-1)
    weight = op.ReduceSum(op.Where(onehot, probs, _f32(op, 0.0)), last, keepdims=1)
    return onehot, weight


def sparsemixer_routing(op, logits, experts: int, jitter_eps: float, dtype: ir.DataType):
    """Router logits [..., E] -> dense top-2 SparseMixer routing weights [..., E], float32."""
    if dtype != F32:
        logits = op.Cast(logits, to=F32)
    eps2 = _f32(op, 2.0 * jitter_eps)
    first, w1 = _sparsemixer_round(op, logits, logits, experts, eps2)
    rest = op.Where(first, _f32(op, float("-inf")), logits)
    second, w2 = _sparsemixer_round(op, logits, rest, experts, eps2)
    zero = _f32(op, 0.0)
    return op.Add(op.Where(first, w1, zero), op.Where(second, w2, zero))


class PhimoeSparseMoE(SparseMoE):
    """Mixtral-named router + experts with SparseMixer top-2 routing."""

    def __init__(self, config: ArchitectureConfig):
        o = config.options
        experts = moe_int("num_local_experts", o.num_local_experts)
        top_k = moe_int("num_experts_per_tok", o.num_experts_per_tok)
        if top_k != 2:
            raise ConfigError(f"config.json: phimoe's SparseMixer routes to exactly 2 experts; "
                              f"num_experts_per_tok={top_k} is not supported")
        jitter = o.router_jitter_noise
        if jitter < 0:
            raise ConfigError(f"config.json: router_jitter_noise must be a number >= 0, "
                              f"got {jitter!r}")
        super().__init__(config.hidden_size, config.intermediate_size, experts, top_k,
                         activation=config.hidden_act, expert_names=MIXTRAL_EXPERT_NAMES)
        self.jitter_eps = jitter

    def forward(self, op, x):
        """The SparseMixer weights w (>= 1/E at the two picks, 0 elsewhere) as the
        renormalized softmax top-2 over log w that com.microsoft MoE fuses, times sum(w)."""
        weights = sparsemixer_routing(op, self.gate(op, x), self.num_experts, self.jitter_eps,
                                      self.dtype)
        chosen = op.Greater(weights, cr.constant(op, 0.0))
        log_weights = op.Log(op.Where(chosen, weights, cr.constant(op, 1.0)))  # no log(0)
        if self.dtype != F32:
            log_weights = op.Cast(log_weights, to=self.dtype)
        routing = cr.chosen_routing(op, log_weights, chosen, self.top_k, self.dtype)
        out = combine_experts(op, x, routing, list(self.experts), self.dtype)
        total = op.ReduceSum(weights, op.Constant(value_ints=[-1]), keepdims=1)
        return cr.scale_tokens(op, out, total, self.dtype)


def _rope_mscale(raw: Mapping[str, Any]) -> dict[str, Any]:
    """LongRoPE's short/long mscale as the one attention factor (ConfigError if they differ)."""
    key = "rope_parameters" if raw.get("rope_parameters") else "rope_scaling"
    params = dict(raw.get(key) or {})
    if params.get("rope_type", params.get("type", "default")) == "default":
        return dict(raw)
    short, long_ = params.get("short_mscale"), params.get("long_mscale")
    if short is None or long_ is None or float(short) != float(long_):
        raise ConfigError(f"config.json: phimoe short_mscale ({short!r}) and long_mscale "
                          f"({long_!r}) must be set and equal")
    params["attention_factor"] = float(short)
    return {**raw, key: params}


class PhimoeDecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + moe(norm(x)); LayerNorms, the MoE named ``block_sparse_moe``."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        eps, hidden = config.rms_norm_eps, config.hidden_size
        self.self_attn = llama_attention(config)
        self.block_sparse_moe = PhimoeSparseMoE(config)
        self.input_layernorm = LayerNorm(hidden, eps)
        self.post_attention_layernorm = LayerNorm(hidden, eps)

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        attn, present_key, present_value = self.self_attn(
            op, self.input_layernorm(op, hidden), cos, sin, mask, past_key, past_value
        )
        hidden = op.Add(hidden, attn)
        hidden = op.Add(hidden, self.block_sparse_moe(op, self.post_attention_layernorm(op, hidden)))
        return hidden, present_key, present_value


class PhimoeForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        eps, hidden = config.rms_norm_eps, config.hidden_size
        layers = [PhimoeDecoderLayer(config) for _ in range(config.num_hidden_layers)]
        super().__init__(config, CausalTransformer(config, layers, LayerNorm(hidden, eps)),
                         lm_head_bias=config.options.lm_head_bias)


FAMILY = ModelFamily(
    name="phimoe", model_types=("phimoe",), architectures=("PhimoeForCausalLM",),
    module=PhimoeForCausalLM, normalize_raw=_rope_mscale, tiny_preset="tiny-phimoe",
    cohorts=("genai", "every-dtype"), options=PhimoeOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-phimoe": {
        **COMMON, "model_type": "phimoe", "architectures": ["PhimoeForCausalLM"],
        "intermediate_size": 52, "num_local_experts": 5, "num_experts_per_tok": 2,
        # SparseMixer drops experts whose score is more than 2 * router_jitter_noise
        # below the best: a discontinuity where two f16 graphs that round in a
        # different order keep different experts for a token at the cut (0.03
        # logits apart at 0.01). The preset keeps the cut out of the way so EP-vs-
        # generic f16 parity measures the graphs; the cut itself is tested in f32
        # (sparse_moe_families_test: router_jitter_noise 0.4).
        "rms_norm_eps": 1e-5, "router_jitter_noise": 10.0, "input_jitter_noise": 0.01,
        "attention_bias": True, "lm_head_bias": True, "sliding_window": None,
    },
}
