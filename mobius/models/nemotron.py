"""Nemotron (Minitron / Nemotron-4): LayerNorm1P (scale stored as ``w - 1``,
with shift), a plain MLP up_proj -> squared ReLU -> down_proj (``mlp_bias``),
optional bias on every attention projection (``attention_bias``) and
partial RoPE (default factor 0.5)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.layer_norm import LayerNorm
from mobius.components.mlp import MLP
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.config.rope import with_partial_rotary_default
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class NemotronOptions:
    norm_eps: float = 1e-5
    hidden_act: str = "relu2"


def _norm(config: ArchitectureConfig, options: NemotronOptions) -> LayerNorm:
    return LayerNorm(config.hidden_size, options.norm_eps, weight_offset=1.0)


class NemotronForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        options = config.options
        layers = [
            PreNormDecoderLayer(
                llama_attention(config),
                MLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                    config.mlp_bias, names=("up_proj", "down_proj")),
                _norm(config, options), _norm(config, options),
            )
            for _ in range(config.num_hidden_layers)
        ]
        super().__init__(config, CausalTransformer(config, layers, _norm(config, options)))


def normalize_nemotron(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Nemotron's partial_rotary_factor defaults to 0.5, not 1."""
    return with_partial_rotary_default(raw, 0.5)


FAMILY = ModelFamily(
    name="nemotron", model_types=("nemotron",), architectures=("NemotronForCausalLM",),
    module=NemotronForCausalLM, tiny_preset="tiny-nemotron", normalize_raw=normalize_nemotron,
    cohorts=("genai",), options=NemotronOptions,
    config_overrides=lambda raw: {"hidden_act": read_options(NemotronOptions, raw).hidden_act},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-nemotron": {**COMMON, "model_type": "nemotron", "architectures": ["NemotronForCausalLM"],
                      "hidden_act": "relu2", "norm_eps": 1e-5, "attention_bias": True,
                      "mlp_bias": True, "partial_rotary_factor": 0.5},
}
