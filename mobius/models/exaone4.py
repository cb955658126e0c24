"""EXAONE 4.0: post-norm layers (norm after each branch, as OLMo 2), per-head QK
RMSNorm, and hybrid attention: sliding-window layers use RoPE, full-attention
layers none (when there is no sliding window, every layer uses RoPE).

The layer kinds come from ``layer_types``, or from ``sliding_window_pattern``:
an int n (every n-th layer full) or a string such as "LLLG" (L local, G global)
repeated over the layers.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PostNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options, reject
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON

SLIDING, FULL = "sliding_attention", "full_attention"


@dataclasses.dataclass(frozen=True)
class Exaone4Options:
    sliding_window_pattern: int | str = 4


def _norm(config: ArchitectureConfig) -> RMSNorm:
    return RMSNorm(config.hidden_size, config.rms_norm_eps)


def rope_layers(config: ArchitectureConfig) -> list[bool]:
    """Per layer: does its attention rotate (every layer without a sliding window, else the
    sliding ones)? EXAONE-MoE (mobius/models/exaone_moe.py) shares the rule."""
    kinds = config.layer_types or (FULL,) * config.num_hidden_layers
    return [config.sliding_window is None or kind == SLIDING for kind in kinds]


def exaone4_attention(config: ArchitectureConfig, rope: bool):
    return llama_attention(config, rotary_dim=config.rope.rotary_dim if rope else None)


def exaone4_body(config: ArchitectureConfig, layers: list) -> CausalTransformer:
    """The decoder over ``layers``, RoPE tables for the rotating ones only."""
    return CausalTransformer(config, layers, _norm(config), layer_rope_kinds=[
        "default" if r else None for r in rope_layers(config)])


class Exaone4ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [
            PostNormDecoderLayer(
                exaone4_attention(config, r),
                GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
                _norm(config), _norm(config),
            )
            for r in rope_layers(config)
        ]
        super().__init__(config, exaone4_body(config, layers))


def normalize_exaone4(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Spells out layer_types from sliding_window_pattern where config.json has none."""
    out = dict(raw)
    if out.get("layer_types") or out.get("sliding_window") is None:
        return out
    pattern = read_options(Exaone4Options, raw).sliding_window_pattern
    layers = int(raw["num_hidden_layers"])
    if isinstance(pattern, str):
        reject(not pattern or set(pattern) - {"L", "G"}, "exaone4",
               f"sliding_window_pattern {pattern!r} (only L and G letters)")
        out["layer_types"] = [SLIDING if pattern[i % len(pattern)] == "L" else FULL
                              for i in range(layers)]
    else:
        reject(pattern <= 0, "exaone4", f"sliding_window_pattern {pattern}")
        out["layer_types"] = [SLIDING if (i + 1) % pattern else FULL for i in range(layers)]
    return out


FAMILY = ModelFamily(
    name="exaone4", model_types=("exaone4",), architectures=("Exaone4ForCausalLM",),
    module=Exaone4ForCausalLM, tiny_preset="tiny-exaone4", normalize_raw=normalize_exaone4,
    cohorts=("genai",),
    options=Exaone4Options, config_overrides=lambda raw: {"qk_norm": True},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-exaone4": {**COMMON, "model_type": "exaone4", "architectures": ["Exaone4ForCausalLM"],
                     "num_hidden_layers": 3, "sliding_window": 4, "rms_norm_eps": 1e-5,
                     "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]},
}
