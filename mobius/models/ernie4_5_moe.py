"""ERNIE-4.5-MoE: the ERNIE 4.5 decoder with routed + shared experts on some layers.

Attention is ERNIE 4.5's (interleaved RoPE; bias on q/k/v/o when ``use_bias``,
which also biases every dense / shared MLP projection and the LM head; the
routed experts never have biases). Layer i is sparse when
``(i + 1) % moe_layer_interval == 0`` and ``moe_layer_start_index <= i <=
moe_layer_end_index`` (-1: the last layer), else a gated MLP of
``intermediate_size``. Routing, on router logits s in float32 (transformers'
Ernie4_5_MoeTopKRouter): p = softmax(s); the top ``moe_k`` of
p + ``moe_statics.e_score_correction_bias`` are chosen and weighted by p
divided by max(sum of their p, ``moe_norm_min``); then the
``moe_num_shared_experts`` shared experts (one gated MLP of
moe_intermediate_size * moe_num_shared_experts) are added. The routing is
built in the fusable form of mobius/components/chosen_routing.py.
head_dim defaults to hidden_size / num_attention_heads (unlike dense ERNIE 4.5).
Checkpoint names: ``mlp.gate.weight``, ``mlp.moe_statics.e_score_correction_bias``
[1, E], ``mlp.experts.{j}.{gate,up,down}_proj.weight``, ``mlp.shared_experts.*``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components import chosen_routing as cr
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.moe import GatedExpert, combine_experts
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import COMMON

F32 = ir.DataType.FLOAT


@dataclasses.dataclass(frozen=True)
class Ernie45MoeOptions:
    """config.json switches, with transformers' Ernie4_5_MoeConfig defaults."""

    use_bias: bool = False
    tie_word_embeddings: bool = True
    moe_intermediate_size: int = 1536
    moe_k: int = 6
    moe_num_experts: int = 64
    moe_num_shared_experts: int = 2
    moe_layer_start_index: int = 1
    moe_layer_end_index: int = -1
    moe_layer_interval: int = 1
    moe_norm_min: float = 1e-12


def _options(raw: Mapping[str, Any]) -> Ernie45MoeOptions:
    o = read_options(Ernie45MoeOptions, raw)
    for key in ("moe_intermediate_size", "moe_k", "moe_num_experts", "moe_layer_interval"):
        positive_int(key, getattr(o, key))
    if o.moe_k > o.moe_num_experts:
        raise ConfigError(f"config.json: moe_k ({o.moe_k}) exceeds moe_num_experts "
                          f"({o.moe_num_experts})")
    if o.moe_num_shared_experts < 0 or not o.moe_norm_min >= 0:
        raise ConfigError("config.json: moe_num_shared_experts and moe_norm_min must be >= 0, "
                          f"got {o.moe_num_shared_experts} and {o.moe_norm_min}")
    return o


def is_sparse_layer(o: Ernie45MoeOptions, layers: int, i: int) -> bool:
    end = layers - 1 if o.moe_layer_end_index == -1 else o.moe_layer_end_index
    return (i + 1) % o.moe_layer_interval == 0 and o.moe_layer_start_index <= i <= end


class MoeStatics(nn.Module):
    """Holds the float32 [1, E] bias added to the router probabilities to choose experts."""

    def __init__(self, experts: int):
        super().__init__()
        self.e_score_correction_bias = Weight([1, experts], dtype=F32)

    def forward(self, op, probs):
        return op.Add(probs, self.e_score_correction_bias)


class Ernie45SparseMoE(nn.Module):
    """Router ``gate``, ``moe_statics``, ``experts.{j}`` and optional ``shared_experts``."""

    def __init__(self, hidden: int, o: Ernie45MoeOptions, activation: str):
        super().__init__()
        self.top_k, self.norm_min = o.moe_k, o.moe_norm_min
        self.dtype = get_build_dtype()
        self.gate = Linear(hidden, o.moe_num_experts)
        self.moe_statics = MoeStatics(o.moe_num_experts)
        self.experts = nn.ModuleList([GatedExpert(hidden, o.moe_intermediate_size, activation)
                                      for _ in range(o.moe_num_experts)])
        self.shared_experts = None
        if o.moe_num_shared_experts:
            self.shared_experts = GatedMLP(
                hidden, o.moe_intermediate_size * o.moe_num_shared_experts, activation, o.use_bias)

    def forward(self, op, x):
        logits = self.gate(op, x)
        probs = op.Softmax(logits if self.dtype == F32 else op.Cast(logits, to=F32), axis=-1)
        choice = self.moe_statics(op, probs)
        chosen = op.GreaterOrEqual(choice, cr.kth_largest(op, choice, self.top_k))
        routing = cr.chosen_routing(op, logits, chosen, self.top_k, self.dtype)
        out = combine_experts(op, x, routing, list(self.experts), self.dtype)
        total = cr.chosen_sum(op, probs, chosen)  # routing is p / total; transformers'
        factor = op.Div(total, op.Max(total, cr.constant(op, self.norm_min)))  # p / max(.)
        out = cr.scale_tokens(op, out, factor, self.dtype)
        if self.shared_experts is not None:
            out = op.Add(out, self.shared_experts(op, x))
        return out


class Ernie4_5_MoeForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = config.options  # checked by _overrides
        eps, hidden, act = config.rms_norm_eps, config.hidden_size, config.hidden_act
        layers = []
        for i in range(config.num_hidden_layers):
            mlp = (Ernie45SparseMoE(hidden, o, act)
                   if is_sparse_layer(o, config.num_hidden_layers, i)
                   else GatedMLP(hidden, config.intermediate_size, act, o.use_bias))
            layers.append(PreNormDecoderLayer(llama_attention(config, rotary_interleaved=True),
                                              mlp, RMSNorm(hidden, eps), RMSNorm(hidden, eps)))
        super().__init__(config, CausalTransformer(config, layers, RMSNorm(hidden, eps)),
                         lm_head_bias=o.use_bias)


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    o = _options(raw)
    return {"qkv_bias": o.use_bias, "o_bias": o.use_bias, "mlp_bias": o.use_bias,
            "tie_word_embeddings": o.tie_word_embeddings}


def normalize_ernie4_5_moe(raw: Mapping[str, Any]) -> dict[str, Any]:
    """rope_theta defaults to 500000 (transformers' default_theta) when config.json names none."""
    out = dict(raw)
    if "rope_theta" not in out and not (out.get("rope_parameters") or {}).get("rope_theta"):
        out["rope_theta"] = 500000.0
    return out


FAMILY = ModelFamily(
    name="ernie4_5_moe", model_types=("ernie4_5_moe",),
    architectures=("Ernie4_5_MoeForCausalLM",), module=Ernie4_5_MoeForCausalLM,
    tiny_preset="tiny-ernie4_5_moe", normalize_raw=normalize_ernie4_5_moe,
    cohorts=("genai", "every-dtype"), options=Ernie45MoeOptions,
    config_overrides=_overrides,
    ignored_tensors=lambda config: (IgnoredTensors(
        r".*\bmtp.*", "multi-token-prediction block (not used by the causal LM)"),),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # ERNIE-4.5-MoE: layer 0 dense, layer 1 routed (top-2 of 6 by p + correction bias) +
    # one shared expert; head_dim = hidden / heads (no head_dim key), biases everywhere.
    "tiny-ernie4_5_moe": {
        **COMMON, "model_type": "ernie4_5_moe", "architectures": ["Ernie4_5_MoeForCausalLM"],
        "rms_norm_eps": 1e-5, "use_bias": True, "tie_word_embeddings": True,
        "moe_intermediate_size": 36, "moe_num_experts": 6, "moe_k": 2,
        "moe_num_shared_experts": 1, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
        "moe_layer_interval": 1, "moe_norm_min": 1e-12,
    },
}
