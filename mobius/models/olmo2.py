"""OLMo 2: post-norm layers (norm after each branch, before the residual add)
and QK RMSNorm over the whole query/key projection (not per head)."""

from __future__ import annotations

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PostNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


def olmo2_decoder_layer(config: ArchitectureConfig) -> PostNormDecoderLayer:
    eps = config.rms_norm_eps
    q_size = config.num_attention_heads * config.head_dim
    kv_size = config.num_key_value_heads * config.head_dim
    return PostNormDecoderLayer(
        llama_attention(config, q_norm=RMSNorm(q_size, eps), k_norm=RMSNorm(kv_size, eps),
                        qk_norm_per_head=False),
        GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
        RMSNorm(config.hidden_size, eps),
        RMSNorm(config.hidden_size, eps),
    )


class Olmo2ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [olmo2_decoder_layer(config) for _ in range(config.num_hidden_layers)]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps))
        super().__init__(config, model)


FAMILY = ModelFamily(
    name="olmo2", model_types=("olmo2",), architectures=("Olmo2ForCausalLM",),
    module=Olmo2ForCausalLM, tiny_preset="tiny-olmo2",
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-olmo2": {**COMMON, "model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"],
                   "rms_norm_eps": 1e-5},
}
