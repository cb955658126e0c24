"""Phi-1.5 / Phi-2: parallel attention + MLP blocks sharing one LayerNorm,
biases everywhere, GELU (tanh) MLP, partial rotary, LM head with bias."""

from __future__ import annotations

import dataclasses

from mobius.components.attention import Attention
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import ParallelDecoderLayer
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.mlp import MLP
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class PhiOptions:
    qk_layernorm: bool = False  # transformers names the norms q_layernorm / k_layernorm


def _layer(config: ArchitectureConfig, i: int) -> ParallelDecoderLayer:
    eps, d = config.rms_norm_eps, config.head_dim
    q_norm = k_norm = None
    if config.options.qk_layernorm:
        q_norm, k_norm = (_renamed(LayerNorm(d, eps), f"model.layers.{i}.self_attn.{name}")
                          for name in ("q_layernorm", "k_layernorm"))
    attention = Attention(
        config.hidden_size, config.num_attention_heads, config.num_key_value_heads, d,
        config.rope.rotary_dim, qkv_bias=True, q_norm=q_norm, k_norm=k_norm,
    )
    attention.o_proj = Linear(config.num_attention_heads * d, config.hidden_size, bias=True,
                              prefix=f"model.layers.{i}.self_attn.dense")
    return ParallelDecoderLayer(
        attention,
        MLP(config.hidden_size, config.intermediate_size, config.hidden_act),
        LayerNorm(config.hidden_size, eps),
    )


def _renamed(norm: LayerNorm, prefix: str) -> LayerNorm:
    norm.weight.checkpoint_name = f"{prefix}.weight"
    norm.bias.checkpoint_name = f"{prefix}.bias"
    return norm


class PhiForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [_layer(config, i) for i in range(config.num_hidden_layers)]
        model = CausalTransformer(config, layers, LayerNorm(config.hidden_size, config.rms_norm_eps),
                                  norm_attribute="final_layernorm")
        super().__init__(config, model, lm_head_bias=True)


FAMILY = ModelFamily(
    name="phi", model_types=("phi",), architectures=("PhiForCausalLM",),
    module=PhiForCausalLM, tiny_preset="tiny-phi", options=PhiOptions,
    config_overrides=lambda raw: {"hidden_act": raw.get("hidden_act", "gelu_new"),
                                  "rms_norm_eps": float(raw.get("layer_norm_eps", 1e-5))},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-phi": {
        **COMMON, "model_type": "phi", "architectures": ["PhiForCausalLM"],
        "num_key_value_heads": 4, "hidden_act": "gelu_new", "layer_norm_eps": 1e-5,
        "partial_rotary_factor": 0.5,
    },
}
