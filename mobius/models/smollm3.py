"""SmolLM3: Llama whose layers listed 0 in ``no_rope_layers`` use no RoPE (NoPE)."""

from __future__ import annotations

import dataclasses

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_decoder_layer
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class SmolLM3Options:
    no_rope_layers: tuple[int, ...] | None = None
    no_rope_layer_interval: int = 4


def uses_rope(config: ArchitectureConfig) -> list[bool]:
    flags = config.options.no_rope_layers
    if flags is None:
        interval = config.options.no_rope_layer_interval
        return [(i + 1) % interval != 0 for i in range(config.num_hidden_layers)]
    if len(flags) != config.num_hidden_layers:
        raise ConfigError(
            f"config.json: no_rope_layers has {len(flags)} entries for "
            f"{config.num_hidden_layers} layers"
        )
    return [bool(f) for f in flags]


class SmolLM3ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        rope = uses_rope(config)
        layers = [llama_decoder_layer(config, rotary_dim=config.rope.rotary_dim if r else None)
                  for r in rope]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                                  layer_rope_kinds=["default" if r else None for r in rope])
        super().__init__(config, model)


FAMILY = ModelFamily(
    name="smollm3", model_types=("smollm3",), architectures=("SmolLM3ForCausalLM",),
    module=SmolLM3ForCausalLM, tiny_preset="tiny-smollm3", options=SmolLM3Options,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-smollm3": {**COMMON, "model_type": "smollm3", "architectures": ["SmolLM3ForCausalLM"],
                     "num_hidden_layers": 4, "no_rope_layers": [1, 1, 1, 0],
                     "no_rope_layer_interval": 4},
}
