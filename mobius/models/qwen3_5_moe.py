"""Qwen 3.5 MoE: Qwen 3.5's gated DeltaNet / gated-attention layers
(mobius/models/qwen3_5.py) with a sparse MoE on every layer.

The feed-forward is Qwen3-Next's sparse block on every layer (transformers' Qwen 3.5
MoE config has no dense layers, decoder_sparse_step or mlp_only_layers): softmax over
``num_experts`` -> top ``num_experts_per_tok``, always renormalized, plus a shared
expert of ``shared_expert_intermediate_size`` scaled by sigmoid(shared_expert_gate(x)).
Checkpoints name each expert (``mlp.experts.{j}.{gate,up,down}_proj``) and may ship a
multi-token-prediction head (``mtp.*``) or the multimodal model's names, read as
Qwen 3.5 dense reads them (the multimodal model: mobius/models/qwen3_5_vl.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.moe import SparseMoE
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.mixtral import moe_int
from mobius.models.qwen3_5 import (ALIASES, TINY_PRESETS as DENSE_PRESETS, UNREAD,
                                   Qwen3_5Options, checked_by)
from mobius.models.qwen3_next import Qwen3NextForCausalLM, normalize


@dataclasses.dataclass(frozen=True)
class Qwen3_5MoeOptions(Qwen3_5Options):
    """The MoE switches, with transformers' Qwen3_5MoeTextConfig defaults."""

    num_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512


def normalize_moe(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen 3.5's defaults; intermediate_size, which no layer reads (every layer is sparse),
    as the experts' size where config.json has none (ArchitectureConfig requires one)."""
    raw = normalize(raw)
    if raw.get("intermediate_size") is None:
        raw["intermediate_size"] = raw.get("moe_intermediate_size") or 512
    return raw


def moe_sizes(o: Qwen3_5MoeOptions) -> tuple[int, int, int, int]:
    """(experts, top_k, expert size, shared expert size), each a positive integer."""
    experts = moe_int("num_experts", o.num_experts)
    top_k = moe_int("num_experts_per_tok", o.num_experts_per_tok)
    if top_k > experts:
        raise ConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds "
                          f"num_experts ({experts})")
    return (experts, top_k, moe_int("moe_intermediate_size", o.moe_intermediate_size),
            moe_int("shared_expert_intermediate_size", o.shared_expert_intermediate_size))


def sparse_mlp(config: ArchitectureConfig, layer: int) -> nn.Module:
    experts, top_k, size, shared = moe_sizes(config.options)
    return SparseMoE(config.hidden_size, size, experts, top_k, normalize_top_k=True,
                     activation=config.hidden_act, shared_expert_size=shared)


def checked(raw: Mapping[str, Any]) -> dict:
    """config_overrides: the DeltaNet and MoE switches checked before any weight is read."""
    moe_sizes(read_options(Qwen3_5MoeOptions, raw))
    return checked_by(Qwen3_5MoeOptions)(raw)


class Qwen3_5MoeForCausalLM(Qwen3NextForCausalLM):
    def __init__(self, config: ArchitectureConfig):
        super().__init__(config, mlp=sparse_mlp, fused_projections=False)


FAMILY = ModelFamily(
    name="qwen3_5_moe_text", model_types=("qwen3_5_moe_text",),
    architectures=("Qwen3_5MoeForCausalLM",), module=Qwen3_5MoeForCausalLM,
    tiny_preset="tiny-qwen3_5_moe", options=Qwen3_5MoeOptions, normalize_raw=normalize_moe,
    config_overrides=checked, cohorts=("genai", "every-dtype"),
    ignored_tensors=lambda config: UNREAD, checkpoint_aliases=ALIASES,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Qwen 3.5's tiny layers (DeltaNet x2, gated attention, DeltaNet) with 5 experts of 36
    # (top 2) + a shared expert of 52 on every layer
    "tiny-qwen3_5_moe": {
        **{k: v for k, v in DENSE_PRESETS["tiny-qwen3_5"].items() if k != "intermediate_size"},
        "model_type": "qwen3_5_moe_text", "architectures": ["Qwen3_5MoeForCausalLM"],
        "num_experts": 5, "num_experts_per_tok": 2, "moe_intermediate_size": 36,
        "shared_expert_intermediate_size": 52,
    },
}
