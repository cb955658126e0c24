"""ERNIE 4.5 (dense): Llama with interleaved RoPE (adjacent pairs rotate), bias
on every attention and MLP projection when ``use_bias``, a tied LM head by
default, and head_dim 128 when config.json does not name it."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_decoder_layer
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class Ernie45Options:
    use_bias: bool = False
    tie_word_embeddings: bool = True


class Ernie4_5ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [llama_decoder_layer(config, rotary_interleaved=True)
                  for _ in range(config.num_hidden_layers)]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps))
        super().__init__(config, model)


def normalize_ernie4_5(raw: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim defaults to 128 (not hidden_size / heads) when the key is absent."""
    out = dict(raw)
    if "head_dim" not in out:
        out["head_dim"] = 128
    return out


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    options = read_options(Ernie45Options, raw)
    bias = options.use_bias
    return {"qkv_bias": bias, "o_bias": bias, "mlp_bias": bias,
            "tie_word_embeddings": options.tie_word_embeddings}


FAMILY = ModelFamily(
    name="ernie4_5", model_types=("ernie4_5",), architectures=("Ernie4_5ForCausalLM",),
    module=Ernie4_5ForCausalLM, tiny_preset="tiny-ernie4_5", normalize_raw=normalize_ernie4_5,
    cohorts=("genai",),
    config_overrides=_overrides,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-ernie4_5": {**COMMON, "model_type": "ernie4_5", "architectures": ["Ernie4_5ForCausalLM"],
                      "head_dim": 16, "use_bias": True, "rms_norm_eps": 1e-5,
                      "tie_word_embeddings": True},
}
