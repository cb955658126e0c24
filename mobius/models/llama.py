"""Llama and its close relatives (Mistral, Qwen2, Qwen3).

The relatives differ only in switches already on ArchitectureConfig: sliding
window (Mistral), QKV bias (Qwen2), per-head QK RMSNorm and an explicit
head_dim (Qwen3). Parameter names mirror the transformers checkpoints, so
weights load without a rename table.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components.attention import Attention
from mobius.components.attention_mask import causal_padding_mask
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.embedding import Embedding
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.components.rotary import RotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.models.family import ModelFamily


def llama_decoder_layer(config: ArchitectureConfig) -> PreNormDecoderLayer:
    return PreNormDecoderLayer(
        self_attn=Attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            config.rope.rotary_dim,
            qkv_bias=config.qkv_bias,
            o_bias=config.o_bias,
            qk_norm_eps=config.rms_norm_eps if config.qk_norm else None,
        ),
        mlp=GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                     config.mlp_bias),
        input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
    )


class LlamaModel(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [llama_decoder_layer(config) for _ in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.rope)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        config = self.config
        hidden = self.embed_tokens(op, input_ids)
        cos, sin = self.rotary_emb(op, position_ids)
        masks = {}
        presents = []
        for i, layer in enumerate(self.layers):
            window = config.layer_sliding_window(i)
            if window not in masks:
                masks[window] = causal_padding_mask(
                    op, input_ids, attention_mask, get_build_dtype(), window
                )
            hidden, present_key, present_value = layer(
                op, hidden, cos, sin, masks[window], *past_key_values[i]
            )
            presents.append((present_key, present_value))
        return self.norm(op, hidden), presents


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.model = LlamaModel(config)
        self.lm_head = Linear(
            config.hidden_size,
            config.vocab_size,
            checkpoint_name="model.embed_tokens.weight" if config.tie_word_embeddings else None,
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        hidden, presents = self.model(op, input_ids, attention_mask, position_ids, past_key_values)
        return self.lm_head(op, hidden), presents


FAMILY = ModelFamily(
    name="llama",
    model_types=("llama",),
    architectures=("LlamaForCausalLM",),
    module=LlamaForCausalLM,
    tiny_preset="tiny-llama",
)
