"""MiniMax-M2: a Mixtral-layout MoE decoder with sigmoid routing biased apart from its weights.

Attention (transformers' MiniMaxM2Attention): no biases; RMSNorm of q and k over
the whole projection (heads * head_dim, as OLMo 2) before RoPE; RoPE
(rotate-half) on the first ``rotary_dim`` of each head (released checkpoints'
legacy key, read as partial_rotary_factor = rotary_dim / head_dim); head_dim
defaults to 128 and rope_theta to 5e6, as MiniMaxM2Config's. Every layer's MLP
is ``block_sparse_moe``: p = sigmoid(gate(x)) in float32; the top
``num_experts_per_tok`` of p + ``e_score_correction_bias`` are chosen, weighted
by p and always renormalized (no scaling factor); experts ``experts.{j}.w1/w3/w2``
of ``intermediate_size``. The routing is built in the fusable form of
mobius/components/chosen_routing.py (weights sigmoid(s) = exp(-softplus(-s))).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components import chosen_routing as cr
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.linear import Linear
from mobius.components.moe import MIXTRAL_EXPERT_NAMES, GatedExpert, combine_experts
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON

F32 = ir.DataType.FLOAT


@dataclasses.dataclass(frozen=True)
class MiniMaxM2Options:
    """config.json switches, with transformers' MiniMaxM2Config defaults."""

    num_local_experts: int = 256
    num_experts_per_tok: int = 8


class MiniMaxM2MoE(nn.Module):
    """Router ``gate``, float32 ``e_score_correction_bias`` and ``experts.{j}`` (w1, w3, w2)."""

    def __init__(self, hidden: int, intermediate: int, experts: int, top_k: int, act: str):
        super().__init__()
        self.top_k = top_k
        self.dtype = get_build_dtype()
        self.gate = Linear(hidden, experts)
        # float32 in every build: it decides expert choices, compared in float32
        self.e_score_correction_bias = Weight([experts], dtype=F32)
        self.experts = nn.ModuleList([
            GatedExpert(hidden, intermediate, act, MIXTRAL_EXPERT_NAMES) for _ in range(experts)])

    def forward(self, op, x):
        logits = self.gate(op, x)
        logits32 = logits if self.dtype == F32 else op.Cast(logits, to=F32)
        choice = op.Add(op.Sigmoid(logits32), self.e_score_correction_bias)
        chosen = op.GreaterOrEqual(choice, cr.kth_largest(op, choice, self.top_k))
        log_probs = op.Neg(op.Softplus(op.Neg(logits32)))  # log sigmoid, finite
        if self.dtype != F32:
            log_probs = op.Cast(log_probs, to=self.dtype)
        routing = cr.chosen_routing(op, log_probs, chosen, self.top_k, self.dtype)
        return combine_experts(op, x, routing, list(self.experts), self.dtype)


class MiniMaxM2DecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + moe(norm(x)); the MoE is named ``block_sparse_moe``."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        o, eps, hidden = config.options, config.rms_norm_eps, config.hidden_size
        q_size = config.num_attention_heads * config.head_dim
        kv_size = config.num_key_value_heads * config.head_dim
        self.self_attn = llama_attention(config, q_norm=RMSNorm(q_size, eps),
                                         k_norm=RMSNorm(kv_size, eps), qk_norm_per_head=False)
        self.block_sparse_moe = MiniMaxM2MoE(hidden, config.intermediate_size,
                                             o.num_local_experts, o.num_experts_per_tok,
                                             config.hidden_act)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        attn, present_key, present_value = self.self_attn(
            op, self.input_layernorm(op, hidden), cos, sin, mask, past_key, past_value)
        hidden = op.Add(hidden, attn)
        moe = self.block_sparse_moe(op, self.post_attention_layernorm(op, hidden))
        hidden = op.Add(hidden, moe)
        return hidden, present_key, present_value


class MiniMaxM2ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [MiniMaxM2DecoderLayer(config) for _ in range(config.num_hidden_layers)]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps))
        super().__init__(config, model)


def normalize_minimax_m2(raw: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim 128 and rope_theta 5e6 by default; ``rotary_dim`` -> partial_rotary_factor."""
    out = {"head_dim": 128, **raw}
    params = out.get("rope_parameters") or {}
    if "rope_theta" not in out and "rope_theta" not in params:
        out["rope_theta"] = 5e6
    rotary_dim = out.get("rotary_dim")
    if rotary_dim is not None and "partial_rotary_factor" not in {**out, **params}:
        positive_int("rotary_dim", rotary_dim)
        out["partial_rotary_factor"] = rotary_dim / positive_int("head_dim", out["head_dim"])
    return out


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    experts = positive_int("num_local_experts", raw.get("num_local_experts", 256))
    top_k = positive_int("num_experts_per_tok", raw.get("num_experts_per_tok", 8))
    if top_k > experts:
        raise ConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds "
                          f"num_local_experts ({experts})")
    return {"qkv_bias": False, "o_bias": False, "mlp_bias": False}


FAMILY = ModelFamily(
    name="minimax_m2", model_types=("minimax_m2",), architectures=("MiniMaxM2ForCausalLM",),
    module=MiniMaxM2ForCausalLM, options=MiniMaxM2Options, normalize_raw=normalize_minimax_m2,
    config_overrides=_overrides, tiny_preset="tiny-minimax_m2", cohorts=("genai", "every-dtype"),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # MiniMax-M2-like: top-3 of 6 experts of 28 on sigmoid + correction bias, q/k norms over
    # the whole projection, RoPE on the first 8 of each 16-wide head (legacy rotary_dim).
    "tiny-minimax_m2": {
        **COMMON, "model_type": "minimax_m2", "architectures": ["MiniMaxM2ForCausalLM"],
        "head_dim": 16, "rotary_dim": 8, "intermediate_size": 28, "num_local_experts": 6,
        "num_experts_per_tok": 3,
    },
}
