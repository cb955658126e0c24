"""StarCoder2: pre-norm LayerNorm (with shift) decoder, biases on every
projection (``use_bias``), plain GELU-tanh MLP named c_fc / c_proj, RoPE,
grouped-query attention with an optional sliding window, tied LM head."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.layer_norm import LayerNorm
from mobius.components.mlp import MLP
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class Starcoder2Options:
    use_bias: bool = True
    norm_epsilon: float = 1e-5
    hidden_act: str = "gelu_pytorch_tanh"
    tie_word_embeddings: bool = True


def _layer(config: ArchitectureConfig, options: Starcoder2Options) -> PreNormDecoderLayer:
    hidden, bias, eps = config.hidden_size, options.use_bias, options.norm_epsilon
    return PreNormDecoderLayer(
        llama_attention(config, qkv_bias=bias, o_bias=bias),
        MLP(hidden, config.intermediate_size, config.hidden_act, bias, names=("c_fc", "c_proj")),
        LayerNorm(hidden, eps), LayerNorm(hidden, eps),
    )


class Starcoder2ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        options = config.options
        layers = [_layer(config, options) for _ in range(config.num_hidden_layers)]
        norm = LayerNorm(config.hidden_size, options.norm_epsilon)
        super().__init__(config, CausalTransformer(config, layers, norm))


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    options = read_options(Starcoder2Options, raw)
    return {"hidden_act": options.hidden_act, "tie_word_embeddings": options.tie_word_embeddings}


FAMILY = ModelFamily(
    name="starcoder2", model_types=("starcoder2",), architectures=("Starcoder2ForCausalLM",),
    module=Starcoder2ForCausalLM, tiny_preset="tiny-starcoder2", config_overrides=_overrides,
    cohorts=("genai",), options=Starcoder2Options,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-starcoder2": {**COMMON, "model_type": "starcoder2",
                        "architectures": ["Starcoder2ForCausalLM"], "hidden_act": "gelu_pytorch_tanh",
                        "norm_epsilon": 1e-5, "use_bias": True, "tie_word_embeddings": True},
}
