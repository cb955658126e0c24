"""Arcee (AFM): Llama's attention and norms with Nemotron's MLP, a plain
up_proj -> squared ReLU -> down_proj (``mlp_bias``) instead of the gated one."""

from __future__ import annotations

import dataclasses

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import MLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class ArceeOptions:
    hidden_act: str = "relu2"  # ArceeConfig's default, where config.json names none


def _norm(config: ArchitectureConfig) -> RMSNorm:
    return RMSNorm(config.hidden_size, config.rms_norm_eps)


class ArceeForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [
            PreNormDecoderLayer(
                llama_attention(config),
                MLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                    config.mlp_bias, names=("up_proj", "down_proj")),
                _norm(config), _norm(config),
            )
            for _ in range(config.num_hidden_layers)
        ]
        super().__init__(config, CausalTransformer(config, layers, _norm(config)))


FAMILY = ModelFamily(
    name="arcee", model_types=("arcee",), architectures=("ArceeForCausalLM",),
    module=ArceeForCausalLM, tiny_preset="tiny-arcee", cohorts=("genai",),
    config_overrides=lambda raw: {"hidden_act": read_options(ArceeOptions, raw).hidden_act},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-arcee": {**COMMON, "model_type": "arcee", "architectures": ["ArceeForCausalLM"],
                   "hidden_act": "relu2", "rms_norm_eps": 1e-5, "attention_bias": True,
                   "mlp_bias": True},
}
