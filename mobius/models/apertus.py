"""Apertus: Llama's attention with per-head QK RMSNorm before RoPE, norms named
``attention_layernorm`` / ``feedforward_layernorm``, and a plain bias-free MLP
up_proj -> xIELU -> down_proj whose activation has its own checkpoint parameters
(mobius/components/xielu.py). A config.json without rope_parameters / rope_scaling
means ApertusConfig's llama3 RoPE (base 12e6, factor 8 over 8192 positions), whatever
its rope_theta says (transformers' reading, which this follows)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import MLP
from mobius.components.rms_norm import RMSNorm
from mobius.components.xielu import XIELU
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON

#: ApertusConfig's RoPE where config.json names none
DEFAULT_ROPE = {"rope_type": "llama3", "rope_theta": 12000000.0, "factor": 8.0,
                "original_max_position_embeddings": 8192, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0}


@dataclasses.dataclass(frozen=True)
class ApertusOptions:
    hidden_act: str = "xielu"


def _norm(config: ArchitectureConfig) -> RMSNorm:
    return RMSNorm(config.hidden_size, config.rms_norm_eps)


def _mlp(config: ArchitectureConfig) -> MLP:
    act = XIELU() if config.hidden_act == "xielu" else config.hidden_act
    return MLP(config.hidden_size, config.intermediate_size, act, bias=False,
               names=("up_proj", "down_proj"))


class ApertusForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [
            PreNormDecoderLayer(llama_attention(config), _mlp(config), _norm(config),
                                _norm(config),
                                names=("attention_layernorm", "feedforward_layernorm"))
            for _ in range(config.num_hidden_layers)
        ]
        super().__init__(config, CausalTransformer(config, layers, _norm(config)))


def normalize_apertus(raw: Mapping[str, Any]) -> dict[str, Any]:
    if raw.get("rope_parameters") or raw.get("rope_scaling"):
        return dict(raw)
    return {**raw, "rope_parameters": dict(DEFAULT_ROPE), "rope_theta": DEFAULT_ROPE["rope_theta"]}


FAMILY = ModelFamily(
    name="apertus", model_types=("apertus",), architectures=("ApertusForCausalLM",),
    module=ApertusForCausalLM, tiny_preset="tiny-apertus", normalize_raw=normalize_apertus,
    cohorts=("genai",),
    config_overrides=lambda raw: {"qk_norm": True,
                                  "hidden_act": read_options(ApertusOptions, raw).hidden_act},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json (llama3 RoPE
#: whose scaling reaches the tiny model's positions)
TINY_PRESETS = {
    "tiny-apertus": {**COMMON, "model_type": "apertus", "architectures": ["ApertusForCausalLM"],
                     "hidden_act": "xielu", "rms_norm_eps": 1e-5, "attention_bias": True,
                     "rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0,
                                         "factor": 8.0, "original_max_position_embeddings": 64,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
}
