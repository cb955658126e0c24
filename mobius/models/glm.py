"""GLM (GLM-4-9B-chat-hf) and GLM-4 (GLM-4-0414).

Both: Llama-like with a fused ``gate_up_proj`` MLP, bias on Q/K/V only
(``attention_bias``, default on), partial (default 0.5) interleaved RoPE
(adjacent pairs rotate). GLM-4 adds a norm after attention and after the MLP
(sandwich norms, named post_self_attn_layernorm / post_mlp_layernorm).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer, SandwichNormDecoderLayer
from mobius.components.linear import split_fused
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.config.rope import with_partial_rotary_default
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON

GLM4_NORMS = ("input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm",
              "post_mlp_layernorm")


@dataclasses.dataclass(frozen=True)
class GlmOptions:
    attention_bias: bool = True


def _parts(config: ArchitectureConfig, i: int):
    attention = llama_attention(config, rotary_interleaved=True)
    mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
    mlp.gate_proj, mlp.up_proj = split_fused(
        config.hidden_size, [config.intermediate_size] * 2, f"model.layers.{i}.mlp.gate_up_proj")
    return attention, mlp


def _norm(config: ArchitectureConfig) -> RMSNorm:
    return RMSNorm(config.hidden_size, config.rms_norm_eps)


class GlmForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [PreNormDecoderLayer(*_parts(config, i), _norm(config), _norm(config))
                  for i in range(config.num_hidden_layers)]
        super().__init__(config, CausalTransformer(config, layers, _norm(config)))


class Glm4ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [SandwichNormDecoderLayer(*_parts(config, i), *(_norm(config) for _ in range(4)),
                                           names=GLM4_NORMS)
                  for i in range(config.num_hidden_layers)]
        super().__init__(config, CausalTransformer(config, layers, _norm(config)))


def normalize_glm(raw: Mapping[str, Any]) -> dict[str, Any]:
    """GLM's partial_rotary_factor defaults to 0.5, not 1, and head_dim to 128 when
    config.json does not name it."""
    out = with_partial_rotary_default(raw, 0.5)
    out.setdefault("head_dim", 128)
    return out


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {"qkv_bias": read_options(GlmOptions, raw).attention_bias, "o_bias": False}


GLM = ModelFamily(
    name="glm", model_types=("glm",), architectures=("GlmForCausalLM",),
    module=GlmForCausalLM, tiny_preset="tiny-glm", normalize_raw=normalize_glm,
    cohorts=("genai",),
    config_overrides=_overrides,
)
GLM4 = ModelFamily(
    name="glm4", model_types=("glm4",), architectures=("Glm4ForCausalLM",),
    module=Glm4ForCausalLM, tiny_preset="tiny-glm4", normalize_raw=normalize_glm,
    cohorts=("genai",),
    config_overrides=_overrides,
)

#: what the registry reads from this module, in lookup order
FAMILIES = (GLM, GLM4)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-glm": {**COMMON, "model_type": "glm", "architectures": ["GlmForCausalLM"],
                 "head_dim": 32, "attention_bias": True, "partial_rotary_factor": 0.5},
    "tiny-glm4": {**COMMON, "model_type": "glm4", "architectures": ["Glm4ForCausalLM"],
                  "head_dim": 32, "attention_bias": True, "partial_rotary_factor": 0.5},
}
