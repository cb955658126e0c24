"""Cohere (Command R) and Cohere2 (Command R7B / A).

Both: parallel blocks (x + attn(ln(x)) + mlp(ln(x)), one norm), LayerNorm
without a shift, interleaved RoPE (adjacent pairs rotate), tied LM head,
logits multiplied by ``logit_scale``. Cohere optionally LayerNorms queries and
keys per head with one [heads, head_dim] weight (``use_qk_norm``). Cohere2
interleaves sliding-window layers, which use RoPE, with full-attention layers
that use none (``layer_types``, or the older ``sliding_window_pattern``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import ParallelDecoderLayer
from mobius.components.layer_norm import LayerNorm, PerHeadLayerNorm
from mobius.components.mlp import GatedMLP
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options, reject
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON

SLIDING = "sliding_attention"


@dataclasses.dataclass(frozen=True)
class CohereOptions:
    logit_scale: float = 0.0625
    layer_norm_eps: float = 1e-5
    use_qk_norm: bool = False
    tie_word_embeddings: bool = True


@dataclasses.dataclass(frozen=True)
class Cohere2Options:
    logit_scale: float = 0.0625
    layer_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    sliding_window_pattern: int = 4
    use_qk_norm: bool = dataclasses.field(default=False, init=False)  # Cohere2 has none


def _layer(config: ArchitectureConfig, options, rope: bool):
    d, eps = config.head_dim, options.layer_norm_eps
    norms = {}
    if options.use_qk_norm:
        norms = dict(q_norm=PerHeadLayerNorm(d, config.num_attention_heads, eps, stacked=True),
                     k_norm=PerHeadLayerNorm(d, config.num_key_value_heads, eps, stacked=True))
    attention = llama_attention(config, rotary_dim=config.rope.rotary_dim if rope else None,
                                rotary_interleaved=True, **norms)
    return ParallelDecoderLayer(
        attention, GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
        LayerNorm(config.hidden_size, eps, bias=False),
    )


class CohereForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig, rope_layers: list[bool] | None = None):
        options = config.options
        rope_layers = rope_layers or [True] * config.num_hidden_layers
        layers = [_layer(config, options, rope) for rope in rope_layers]
        model = CausalTransformer(config, layers,
                                  LayerNorm(config.hidden_size, options.layer_norm_eps, bias=False),
                                  layer_rope_kinds=["default" if r else None for r in rope_layers])
        super().__init__(config, model, logits_divisor=1.0 / options.logit_scale)


class Cohere2ForCausalLM(CohereForCausalLM):
    """RoPE on the sliding-window layers only."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__(config, [kind == SLIDING for kind in config.layer_types])


def _overrides(raw: Mapping[str, Any], options_class=CohereOptions) -> dict[str, Any]:
    options = read_options(options_class, raw)
    reject(options.logit_scale == 0, str(raw.get("model_type")), "logit_scale 0")
    return {"tie_word_embeddings": options.tie_word_embeddings}


def _cohere2_overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    return _overrides(raw, Cohere2Options)


def normalize_cohere2(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Spells out Cohere2's layer_types from the older sliding_window_pattern."""
    out = dict(raw)
    if not out.get("layer_types"):
        pattern = read_options(Cohere2Options, raw).sliding_window_pattern
        reject(pattern <= 0, "cohere2", f"sliding_window_pattern {pattern}")
        out["layer_types"] = [SLIDING if (i + 1) % pattern else "full_attention"
                              for i in range(int(raw["num_hidden_layers"]))]
    out.setdefault("sliding_window", 4096)
    reject(out["sliding_window"] is None and SLIDING in out["layer_types"], "cohere2",
           "sliding_attention layers with sliding_window null")
    return out


COHERE = ModelFamily(
    name="cohere", model_types=("cohere",), architectures=("CohereForCausalLM",),
    module=CohereForCausalLM, tiny_preset="tiny-cohere", config_overrides=_overrides,
    options=CohereOptions, cohorts=("genai",),
)
COHERE2 = ModelFamily(
    name="cohere2", model_types=("cohere2",), architectures=("Cohere2ForCausalLM",),
    module=Cohere2ForCausalLM, tiny_preset="tiny-cohere2", config_overrides=_cohere2_overrides,
    options=Cohere2Options, cohorts=("genai",),
    normalize_raw=normalize_cohere2,
)

#: what the registry reads from this module, in lookup order
FAMILIES = (COHERE, COHERE2)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-cohere": {**COMMON, "model_type": "cohere", "architectures": ["CohereForCausalLM"],
                    "layer_norm_eps": 1e-5, "logit_scale": 0.25, "use_qk_norm": True,
                    "tie_word_embeddings": True},
    "tiny-cohere2": {**COMMON, "model_type": "cohere2", "architectures": ["Cohere2ForCausalLM"],
                     "layer_norm_eps": 1e-5, "logit_scale": 0.25, "tie_word_embeddings": True,
                     "num_hidden_layers": 3, "sliding_window": 4,
                     "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]},
}
