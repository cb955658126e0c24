"""Granite: Llama with four scalar multipliers.

embedding_multiplier scales the embeddings, residual_multiplier each branch
before its residual add, attention_multiplier replaces 1/sqrt(head_dim) as the
attention scale, and logits are divided by logits_scaling.
"""

from __future__ import annotations

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


class GraniteForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        raw = config.raw
        layers = [
            PreNormDecoderLayer(
                llama_attention(config, scale=raw.get("attention_multiplier", 1.0)),
                GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                         config.mlp_bias),
                RMSNorm(config.hidden_size, config.rms_norm_eps),
                RMSNorm(config.hidden_size, config.rms_norm_eps),
                residual_scale=raw.get("residual_multiplier", 1.0),
            )
            for _ in range(config.num_hidden_layers)
        ]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                                  embed_scale=raw.get("embedding_multiplier", 1.0))
        super().__init__(config, model, logits_divisor=raw.get("logits_scaling", 1.0))


FAMILY = ModelFamily(
    name="granite", model_types=("granite",), architectures=("GraniteForCausalLM",),
    module=GraniteForCausalLM, tiny_preset="tiny-granite",
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-granite": {
        **COMMON, "model_type": "granite", "architectures": ["GraniteForCausalLM"],
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
        "logits_scaling": 8.0,
    },
}
