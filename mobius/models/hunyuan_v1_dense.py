"""Hunyuan dense (Hunyuan-7B / 4B / 1.8B / 0.5B): Llama whose per-head QK
RMSNorm (``query_layernorm`` / ``key_layernorm``) applies *after* RoPE.

Its checkpoints label their RoPE "dynamic" with a fixed NTK ``alpha``, which
only stretches the base (theta * alpha ** (d / (d - 2))) and does not depend on
the sequence length: it is built as static RoPE with that base.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_decoder_layer
from mobius.tiny.bases import COMMON


class HunYuanDenseV1ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        d, eps = config.head_dim, config.rms_norm_eps
        layers = [
            llama_decoder_layer(config, q_norm=RMSNorm(d, eps), k_norm=RMSNorm(d, eps),
                                qk_norm_names=("query_layernorm", "key_layernorm"),
                                qk_norm_after_rope=True)
            for _ in range(config.num_hidden_layers)
        ]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, eps))
        super().__init__(config, model)


def normalize_hunyuan(raw: Mapping[str, Any]) -> dict[str, Any]:
    """"dynamic" RoPE with a fixed alpha -> default RoPE with the stretched base."""
    out = dict(raw)
    key = "rope_parameters" if out.get("rope_parameters") else "rope_scaling"
    params = dict(out.get(key) or {})
    alpha = params.get("alpha")
    if params.get("rope_type", params.get("type")) != "dynamic" or not alpha:
        return out
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha <= 0:
        raise ConfigError(f"config.json: rope alpha must be a positive number, got {alpha!r}")
    heads = out.get("num_attention_heads") or 1
    d = out.get("head_dim") or out["hidden_size"] // heads
    theta = params.get("rope_theta", out.get("rope_theta", 10000.0))
    stretched = float(theta) * float(alpha) ** (d / (d - 2))
    if not math.isfinite(stretched):
        raise ConfigError(f"config.json: rope alpha {alpha!r} gives an infinite RoPE base")
    out[key] = {"rope_type": "default", "rope_theta": stretched}
    out["rope_theta"] = stretched
    return out


FAMILY = ModelFamily(
    name="hunyuan_v1_dense", model_types=("hunyuan_v1_dense",),
    architectures=("HunYuanDenseV1ForCausalLM",), module=HunYuanDenseV1ForCausalLM,
    tiny_preset="tiny-hunyuan_v1_dense", normalize_raw=normalize_hunyuan,
    cohorts=("genai", "every-dtype"), attention_traits=("qk_norm_after_rope",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-hunyuan_v1_dense": {**COMMON, "model_type": "hunyuan_v1_dense",
                              "architectures": ["HunYuanDenseV1ForCausalLM"], "head_dim": 16,
                              "rms_norm_eps": 1e-5, "attention_bias": True},
}
