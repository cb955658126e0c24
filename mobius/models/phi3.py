"""Phi-3 / Phi-3.5: Llama with fused ``qkv_proj`` and ``gate_up_proj`` checkpoint
tensors (split into Q/K/V and gate/up at load time), LongRoPE (short/long
factors switched on sequence length) and partial rotary where configured."""

from __future__ import annotations

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.linear import split_fused
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


def _layer(config: ArchitectureConfig, i: int) -> PreNormDecoderLayer:
    prefix = f"model.layers.{i}"
    d, hidden = config.head_dim, config.hidden_size
    attention = llama_attention(config)
    attention.q_proj, attention.k_proj, attention.v_proj = split_fused(
        hidden, [config.num_attention_heads * d, config.num_key_value_heads * d,
                 config.num_key_value_heads * d], f"{prefix}.self_attn.qkv_proj", config.qkv_bias)
    mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act)
    mlp.gate_proj, mlp.up_proj = split_fused(
        hidden, [config.intermediate_size] * 2, f"{prefix}.mlp.gate_up_proj")
    return PreNormDecoderLayer(attention, mlp, RMSNorm(hidden, config.rms_norm_eps),
                               RMSNorm(hidden, config.rms_norm_eps))


class Phi3ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [_layer(config, i) for i in range(config.num_hidden_layers)]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps))
        super().__init__(config, model)


FAMILY = ModelFamily(
    name="phi3", model_types=("phi3",), architectures=("Phi3ForCausalLM",),
    module=Phi3ForCausalLM, tiny_preset="tiny-phi3",
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-phi3": {**COMMON, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"],
                  "pad_token_id": 0, "rms_norm_eps": 1e-5},
    "tiny-phi3.5": {
        **COMMON, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"],
        "max_position_embeddings": 128, "original_max_position_embeddings": 32,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(8)],
                         "long_factor": [1.5 + 0.25 * i for i in range(8)]},
        "partial_rotary_factor": 1.0,
    },
}
