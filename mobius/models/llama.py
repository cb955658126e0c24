"""Llama: pre-norm decoder, RMSNorm, SiLU-gated MLP, RoPE, grouped-query attention.

Mistral and Qwen2/Qwen3 reuse these classes: they differ only in switches
already on ArchitectureConfig (sliding window, QKV bias, per-head QK norm).
Parameter names mirror the transformers checkpoints, so weights load without
a rename table.
"""

from __future__ import annotations

from mobius.components.attention import Attention
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.tiny.bases import COMMON


def llama_attention(config: ArchitectureConfig, **overrides) -> Attention:
    qk_norm = config.qk_norm
    kwargs = dict(
        qkv_bias=config.qkv_bias,
        o_bias=config.o_bias,
        q_norm=RMSNorm(config.head_dim, config.rms_norm_eps) if qk_norm else None,
        k_norm=RMSNorm(config.head_dim, config.rms_norm_eps) if qk_norm else None,
        rotary_interleaved=config.rope.interleaved,
    )
    kwargs.update(overrides)
    rotary_dim = kwargs.pop("rotary_dim", config.rope.rotary_dim)
    return Attention(config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                     config.head_dim, rotary_dim, **kwargs)


def llama_decoder_layer(config: ArchitectureConfig, **attention_overrides) -> PreNormDecoderLayer:
    return PreNormDecoderLayer(
        self_attn=llama_attention(config, **attention_overrides),
        mlp=GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                     config.mlp_bias),
        input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
    )


class LlamaForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        model = CausalTransformer(
            config,
            [llama_decoder_layer(config) for _ in range(config.num_hidden_layers)],
            RMSNorm(config.hidden_size, config.rms_norm_eps),
        )
        super().__init__(config, model)


FAMILY = ModelFamily(
    name="llama", cohorts=("every-dtype",),
    model_types=("llama",),
    architectures=("LlamaForCausalLM",),
    module=LlamaForCausalLM,
    tiny_preset="tiny-llama",
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-llama": {**COMMON, "model_type": "llama", "architectures": ["LlamaForCausalLM"]},
}
