"""Granite: Llama with four scalar multipliers.

embedding_multiplier scales the embeddings, residual_multiplier each branch
before its residual add, attention_multiplier replaces 1/sqrt(head_dim) as the
attention scale, and logits are divided by logits_scaling.
"""

from __future__ import annotations

import dataclasses

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class GraniteOptions:
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float = 1.0
    logits_scaling: float = 1.0


class GraniteForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = config.options
        layers = [
            PreNormDecoderLayer(
                llama_attention(config, scale=o.attention_multiplier),
                GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                         config.mlp_bias),
                RMSNorm(config.hidden_size, config.rms_norm_eps),
                RMSNorm(config.hidden_size, config.rms_norm_eps),
                residual_scale=o.residual_multiplier,
            )
            for _ in range(config.num_hidden_layers)
        ]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                                  embed_scale=o.embedding_multiplier)
        super().__init__(config, model, logits_divisor=o.logits_scaling)


FAMILY = ModelFamily(
    name="granite", model_types=("granite",), architectures=("GraniteForCausalLM",),
    module=GraniteForCausalLM, tiny_preset="tiny-granite", options=GraniteOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-granite": {
        **COMMON, "model_type": "granite", "architectures": ["GraniteForCausalLM"],
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
        "logits_scaling": 8.0,
    },
}
