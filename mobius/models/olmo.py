"""OLMo (v1): Llama with parameter-free LayerNorms (eps 1e-5, no scale or
shift) in place of RMSNorm, and optional clamping of the Q/K/V projections
(``clip_qkv``)."""

from __future__ import annotations

import dataclasses

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.layer_norm import LayerNorm
from mobius.components.mlp import GatedMLP
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON

EPS = 1e-5  # fixed in OLMo's LayerNorm, not read from config.json


@dataclasses.dataclass(frozen=True)
class OlmoOptions:
    clip_qkv: float | None = None


def _norm(config: ArchitectureConfig) -> LayerNorm:
    return LayerNorm(config.hidden_size, EPS, affine=False)


class OlmoForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [
            PreNormDecoderLayer(
                llama_attention(config, clip_qkv=config.options.clip_qkv),
                GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
                _norm(config), _norm(config),
            )
            for _ in range(config.num_hidden_layers)
        ]
        super().__init__(config, CausalTransformer(config, layers, _norm(config)))


FAMILY = ModelFamily(
    name="olmo", model_types=("olmo",), architectures=("OlmoForCausalLM",),
    module=OlmoForCausalLM, tiny_preset="tiny-olmo", options=OlmoOptions,
    cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-olmo": {**COMMON, "model_type": "olmo", "architectures": ["OlmoForCausalLM"],
                  "attention_bias": True, "clip_qkv": 0.1},
}
