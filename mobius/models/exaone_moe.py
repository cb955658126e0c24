"""EXAONE-MoE (K-EXAONE, ExaoneMoeForCausalLM): EXAONE 4.0's attention (per-head QK
RMSNorm; RoPE on the sliding-window layers only: mobius/models/exaone4.py; transformers'
config always has a ``sliding_window``) in pre-norm layers (input_layernorm,
post_attention_layernorm, as OLMoE), whose MLP is dense or DeepSeek-V3's routed experts
(mobius/models/deepseek_moe.py: sigmoid scores, ``e_score_correction_bias`` for the choice,
``topk_group`` of ``n_group`` groups, ``norm_topk_prob``, ``routed_scaling_factor``) plus a
shared gated MLP of moe_intermediate_size * ``num_shared_experts``.

Which layers are sparse is ``mlp_layer_types`` ("dense" / "sparse" per layer), else all
but the first ``first_k_dense_replace``. The checkpoint keeps each sparse layer's correction
bias beside its router (``mlp.e_score_correction_bias``) and may hold multi-token-prediction
weights (``mtp.*``), which transformers leaves unread, as mobius does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options, reject
from mobius.errors import ConfigError
from mobius.models.deepseek_moe import DeepseekMoE
from mobius.models.exaone4 import (exaone4_attention, exaone4_body, normalize_exaone4,
                                   rope_layers)
from mobius.models.family import ModelFamily
from mobius.tiny.bases import COMMON
from mobius.weights.attach import IgnoredTensors

LAYER_KINDS = ("dense", "sparse")


@dataclasses.dataclass(frozen=True)
class ExaoneMoeOptions:
    """config.json switches, with transformers' ExaoneMoeConfig defaults
    (mlp_layer_types: spelled out by normalize_exaone_moe)."""

    mlp_layer_types: tuple[str, ...] = ()
    moe_intermediate_size: int = 1024
    num_experts: int = 64
    num_experts_per_tok: int = 8
    num_shared_experts: int = 1
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 2.5
    n_group: int = 1
    topk_group: int = 1


def _checked(o: ExaoneMoeOptions) -> ExaoneMoeOptions:
    for key in ("moe_intermediate_size", "num_experts", "num_experts_per_tok",
                "num_shared_experts", "n_group", "topk_group"):
        positive_int(key, getattr(o, key))
    experts, groups = o.num_experts, o.n_group
    if experts % groups or o.topk_group > groups or experts // groups < 2:
        raise ConfigError(f"config.json: {experts} experts do not split into n_group={groups} "
                          f"groups of at least 2 with topk_group={o.topk_group} of them kept")
    if o.num_experts_per_tok > (experts // groups) * o.topk_group:
        raise ConfigError(f"config.json: num_experts_per_tok ({o.num_experts_per_tok}) exceeds "
                          f"the experts of the {o.topk_group} kept groups")
    return o


def normalize_exaone_moe(raw: Mapping[str, Any]) -> dict[str, Any]:
    """EXAONE 4.0's layer_types, and mlp_layer_types from first_k_dense_replace (default 1)
    where config.json has none."""
    reject(raw.get("sliding_window") is None, "exaone_moe",
           "sliding_window null (transformers' ExaoneMoeConfig requires a window)")
    out = normalize_exaone4(raw)
    layers = positive_int("num_hidden_layers", raw.get("num_hidden_layers"))
    kinds = raw.get("mlp_layer_types")
    if kinds is None:
        first = raw.get("first_k_dense_replace", 1)
        if not isinstance(first, int) or first < 0:
            raise ConfigError(f"config.json: first_k_dense_replace must be an int >= 0, "
                              f"got {first!r}")
        kinds = ["dense" if i < first else "sparse" for i in range(layers)]
    if not isinstance(kinds, list) or len(kinds) != layers or not set(kinds) <= set(LAYER_KINDS):
        raise ConfigError(f"config.json: mlp_layer_types must name 'dense' or 'sparse' for each "
                          f"of the {layers} layers, got {kinds!r}")
    out["mlp_layer_types"] = kinds
    return out


def _mlp(config: ArchitectureConfig, kind: str):
    o, hidden, act = config.options, config.hidden_size, config.hidden_act
    if kind == "dense":
        return GatedMLP(hidden, config.intermediate_size, act)
    return DeepseekMoE(hidden, o.moe_intermediate_size, o.num_experts, o.num_experts_per_tok,
                       method="noaux_tc", groups=o.n_group, topk_group=o.topk_group,
                       scaling=o.routed_scaling_factor, normalize=o.norm_topk_prob,
                       shared_size=o.moe_intermediate_size * o.num_shared_experts,
                       activation=act, bias_beside_gate=True)


class ExaoneMoeForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        eps, hidden = config.rms_norm_eps, config.hidden_size
        layers = [PreNormDecoderLayer(exaone4_attention(config, rope), _mlp(config, kind),
                                      RMSNorm(hidden, eps), RMSNorm(hidden, eps))
                  for rope, kind in zip(rope_layers(config), config.options.mlp_layer_types)]
        super().__init__(config, exaone4_body(config, layers))


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    _checked(read_options(ExaoneMoeOptions, raw))
    return {"qk_norm": True, "mlp_bias": False}


FAMILY = ModelFamily(
    name="exaone_moe", model_types=("exaone_moe",), architectures=("ExaoneMoeForCausalLM",),
    module=ExaoneMoeForCausalLM, tiny_preset="tiny-exaone_moe", normalize_raw=normalize_exaone_moe,
    cohorts=("genai", "every-dtype"), options=ExaoneMoeOptions, config_overrides=_overrides,
    ignored_tensors=lambda config: (IgnoredTensors(
        r"mtp\..*", "multi-token-prediction weights (not used by the causal LM)"),),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # K-EXAONE-like: layers 0, 1 sliding (window 4, RoPE), 2 full (no RoPE); layer 0 dense,
    # layers 1-2 top-2 of 8 in 2 of 4 groups, renormalized, scaled 2.5, + a shared expert.
    "tiny-exaone_moe": {
        **COMMON, "model_type": "exaone_moe", "architectures": ["ExaoneMoeForCausalLM"],
        "num_hidden_layers": 3, "sliding_window": 4, "rms_norm_eps": 1e-5,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "mlp_layer_types": ["dense", "sparse", "sparse"], "moe_intermediate_size": 24,
        "num_experts": 8, "num_experts_per_tok": 2, "num_shared_experts": 1, "n_group": 4,
        "topk_group": 2, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
    },
}
