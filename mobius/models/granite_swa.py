"""Granite SWA and GraniteMoE SWA (granite-swash): Granite's multipliers with sliding-window
attention, a learned sink per head, and a RoPE base per layer.

* ``layer_types`` picks each layer's attention: "sliding_attention" (a window of
  ``sliding_window``, default 128) or "full_attention"; without it every fourth layer
  (i % 4 == 0) is full, the rest sliding, as GraniteSWAConfig builds it.
* The sink (``self_attn.sinks`` [heads]) scales each head's output by
  sigmoid(logsumexp(logits) - sink): the same as gpt-oss's extra softmax logit
  (mobius/components/attention_sinks.py).
* ``layer_rope_theta`` gives each layer its RoPE base (the rest of the RoPE
  parameters shared); 0 is a layer without positions (NoPE). Absent: rope_theta
  everywhere.
* granite_swa: Granite's gated MLP (``mlp``). granitemoe_swa: GraniteMoE's top-k
  experts (transformers 5's ``block_sparse_moe.experts.gate_up_proj`` / ``down_proj`` and
  ``router.weight``) plus, when ``shared_intermediate_size`` > 0, GraniteMoeShared's
  ungated ``shared_mlp`` added to them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM, CausalTransformer, scalar
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.granite import GraniteOptions
from mobius.models.granitemoe import GraniteMoeOptions, granitemoe_block
from mobius.models.granitemoehybrid import SharedMLP
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON

SLIDING, FULL = "sliding_attention", "full_attention"
#: transformers 5's names (under block_sparse_moe) of the router and the stacked experts
SWA_EXPERT_NAMES = ("router.weight", "experts.gate_up_proj", "experts.down_proj")


@dataclasses.dataclass(frozen=True)
class GraniteSwaOptions(GraniteOptions):
    layer_rope_theta: tuple[float, ...] | None = None


@dataclasses.dataclass(frozen=True)
class GraniteMoeSwaOptions(GraniteMoeOptions):
    layer_rope_theta: tuple[float, ...] | None = None
    shared_intermediate_size: int = 0


def normalize_granite_swa(raw: Mapping[str, Any]) -> dict[str, Any]:
    """GraniteSWAConfig's window (128) and layer types where config.json has none."""
    out = {"sliding_window": 128, **raw}
    if not out.get("layer_types"):
        out["layer_types"] = [FULL if i % 4 == 0 else SLIDING
                              for i in range(int(out["num_hidden_layers"]))]
    return out


def _checked(options: type):
    """config_overrides: layer_rope_theta has a finite base >= 0 for every layer."""
    def overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
        o = read_options(options, raw)
        thetas, layers = o.layer_rope_theta, raw.get("num_hidden_layers")
        if thetas is not None and (len(thetas) < layers or
                                   not all(math.isfinite(t) and t >= 0 for t in thetas)):
            raise ConfigError(f"config.json: layer_rope_theta must give each of the {layers} "
                              f"layers a finite RoPE base >= 0 (0: no RoPE), got {list(thetas)}")
        if getattr(o, "shared_intermediate_size", 0) < 0:
            raise ConfigError(f"config.json: shared_intermediate_size must be >= 0, got "
                              f"{o.shared_intermediate_size}")
        return {}

    return overrides


def _layer_ropes(config: ArchitectureConfig) -> tuple[dict, list[str | None]]:
    """(RoPE kind -> config, each layer's kind or None for NoPE), a kind per distinct base."""
    n = config.num_hidden_layers
    thetas = config.options.layer_rope_theta or (config.rope.theta,) * n
    bases = sorted({t for t in thetas[:n] if t})
    ropes = {f"base{i}": dataclasses.replace(config.rope, theta=t) for i, t in enumerate(bases)}
    return ropes, [f"base{bases.index(t)}" if t else None for t in thetas[:n]]


def _attention(config: ArchitectureConfig, rope: bool):
    return llama_attention(config, scale=config.options.attention_multiplier, sinks=True,
                           **({} if rope else {"rotary_dim": 0}))


class GraniteMoeSwaDecoderLayer(nn.Module):
    """x + s * attn(norm(x)), then x + s * (moe(norm(x)) [+ shared_mlp(norm(x))])."""

    def __init__(self, config: ArchitectureConfig, layer: int, rope: bool):
        super().__init__()
        o, eps, hidden = config.options, config.rms_norm_eps, config.hidden_size
        self.self_attn = _attention(config, rope)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.block_sparse_moe = granitemoe_block(config, layer, SWA_EXPERT_NAMES)
        self.shared_mlp = (SharedMLP(hidden, o.shared_intermediate_size, config.hidden_act)
                           if o.shared_intermediate_size else None)
        self.residual_scale = o.residual_multiplier

    def _scaled(self, op, x):
        return x if self.residual_scale == 1.0 else op.Mul(x, scalar(op, self.residual_scale))

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        attn, key, value = self.self_attn(op, self.input_layernorm(op, hidden), cos, sin, mask,
                                          past_key, past_value)
        hidden = op.Add(hidden, self._scaled(op, attn))
        normed = self.post_attention_layernorm(op, hidden)
        ff = self.block_sparse_moe(op, normed)
        if self.shared_mlp is not None:
            ff = op.Add(ff, self.shared_mlp(op, normed))
        return op.Add(hidden, self._scaled(op, ff)), key, value


class GraniteSwaForCausalLM(CausalLM):
    """GraniteSWAForCausalLM, and (``moe``) GraniteMoeSWAForCausalLM."""

    def __init__(self, config: ArchitectureConfig, *, moe: bool = False):
        o, eps, hidden = config.options, config.rms_norm_eps, config.hidden_size
        ropes, kinds = _layer_ropes(config)
        if moe:
            layers = [GraniteMoeSwaDecoderLayer(config, i, kind is not None)
                      for i, kind in enumerate(kinds)]
        else:
            layers = [PreNormDecoderLayer(
                _attention(config, kind is not None),
                GatedMLP(hidden, config.intermediate_size, config.hidden_act, config.mlp_bias),
                RMSNorm(hidden, eps), RMSNorm(hidden, eps), residual_scale=o.residual_multiplier)
                for kind in kinds]
        model = CausalTransformer(config, layers, RMSNorm(hidden, eps), ropes=ropes,
                                  layer_rope_kinds=kinds, embed_scale=o.embedding_multiplier)
        super().__init__(config, model, logits_divisor=o.logits_scaling)


class GraniteMoeSwaForCausalLM(GraniteSwaForCausalLM):
    def __init__(self, config: ArchitectureConfig):
        super().__init__(config, moe=True)


GRANITE_SWA = ModelFamily(
    name="granite_swa", model_types=("granite_swa",), architectures=("GraniteSWAForCausalLM",),
    module=GraniteSwaForCausalLM, tiny_preset="tiny-granite_swa", options=GraniteSwaOptions,
    normalize_raw=normalize_granite_swa, config_overrides=_checked(GraniteSwaOptions),
    cohorts=("genai",), attention_traits=("attention_sinks",),
)

GRANITEMOE_SWA = ModelFamily(
    name="granitemoe_swa", model_types=("granitemoe_swa",),
    architectures=("GraniteMoeSWAForCausalLM",), module=GraniteMoeSwaForCausalLM,
    tiny_preset="tiny-granitemoe_swa", options=GraniteMoeSwaOptions,
    normalize_raw=normalize_granite_swa, config_overrides=_checked(GraniteMoeSwaOptions),
    cohorts=("genai",), attention_traits=("attention_sinks",),
)

#: what the registry reads from this module, in lookup order
FAMILIES = (GRANITE_SWA, GRANITEMOE_SWA)

_MULTIPLIERS = {"embedding_multiplier": 4.0, "residual_multiplier": 0.5,
                "attention_multiplier": 0.125, "logits_scaling": 2.0}
#: layers: sliding with base 40000, full NoPE, sliding with base 10000 (window 4 < the
#: tests' prompts); no multiplier 1
_SWA = {"num_hidden_layers": 3, "sliding_window": 4,
        "layer_types": [SLIDING, FULL, SLIDING], "layer_rope_theta": [40000.0, 0, 10000.0]}

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-granite_swa": {
        **COMMON, **_MULTIPLIERS, **_SWA, "model_type": "granite_swa",
        "architectures": ["GraniteSWAForCausalLM"], "attention_bias": True, "mlp_bias": True,
    },
    # 6 experts of 36, top-2, + a shared MLP of 52
    "tiny-granitemoe_swa": {
        **COMMON, **_MULTIPLIERS, **_SWA, "model_type": "granitemoe_swa",
        "architectures": ["GraniteMoeSWAForCausalLM"], "intermediate_size": 36,
        "num_local_experts": 6, "num_experts_per_tok": 2, "shared_intermediate_size": 52,
        "attention_bias": True,
    },
}
