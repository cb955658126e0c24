"""OLMo 3: OLMo 2's layers (post-norm, QK RMSNorm over the whole projection) with
sliding-window attention on the layers ``layer_types`` marks (default: three of every
four) and a RoPE per layer type: the full-attention layers take the checkpoint's RoPE
scaling (YaRN in the long-context models), the sliding ones plain RoPE.

transformers 5 saves rope_parameters nested by layer type; a hub config.json in the 4.x
spelling (rope_theta + rope_scaling) gives its scaling and base to the full-attention
layers only, and the sliding layers keep Olmo3Config's base 500000 (transformers'
reading, which this follows).
"""

from __future__ import annotations

from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.rope import RopeConfig, RopeKeys
from mobius.models.family import ModelFamily
from mobius.models.olmo2 import olmo2_decoder_layer
from mobius.tiny.bases import COMMON

SLIDING, FULL = "sliding_attention", "full_attention"
#: Olmo3Config's RoPE base where config.json gives none
DEFAULT_THETA = 500000.0


class Olmo3ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        options = config.options
        sliding = RopeConfig.from_hf(
            options.rope_raw(config.max_position_embeddings,
                             rope_parameters=options.rope_parameters[SLIDING]), config.head_dim)
        layers = [olmo2_decoder_layer(config) for _ in range(config.num_hidden_layers)]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                                  ropes={FULL: config.rope, SLIDING: sliding},
                                  layer_rope_kinds=list(config.layer_types))
        super().__init__(config, model)


def normalize_olmo3(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Olmo3Config's defaults (window 4096, every fourth layer full) and rope_parameters
    nested by layer type, whichever spelling config.json uses."""
    out = {"rope_theta": DEFAULT_THETA, "sliding_window": 4096, **raw}
    if not out.get("layer_types"):
        out["layer_types"] = [FULL if (i + 1) % 4 == 0 else SLIDING
                              for i in range(int(out["num_hidden_layers"]))]
    params = dict(out.pop("rope_scaling", None) or out.get("rope_parameters") or {})
    if FULL not in params and SLIDING not in params:  # 4.x spelling: the full layers' RoPE
        params = {FULL: {"rope_type": "default", "rope_theta": out["rope_theta"], **params},
                  SLIDING: {"rope_type": "default"}}
    out["rope_parameters"] = {kind: {"rope_theta": DEFAULT_THETA, **(params.get(kind) or {})}
                              for kind in (FULL, SLIDING)}
    return out


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The model-level RoPE is the full-attention layers' one."""
    head_dim = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    return {"rope": RopeConfig.from_hf({**raw, "rope_parameters": raw["rope_parameters"][FULL]},
                                       head_dim)}


FAMILY = ModelFamily(
    name="olmo3", model_types=("olmo3",), architectures=("Olmo3ForCausalLM",),
    module=Olmo3ForCausalLM, tiny_preset="tiny-olmo3", normalize_raw=normalize_olmo3,
    config_overrides=_overrides, options=RopeKeys, cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json (window 4 <
#: the tests' prompts; each layer type its own RoPE base)
TINY_PRESETS = {
    "tiny-olmo3": {**COMMON, "model_type": "olmo3", "architectures": ["Olmo3ForCausalLM"],
                   "rms_norm_eps": 1e-5, "sliding_window": 4,
                   "layer_types": [SLIDING, FULL],
                   "rope_parameters": {SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
                                       FULL: {"rope_type": "default", "rope_theta": 40000.0}}},
}
