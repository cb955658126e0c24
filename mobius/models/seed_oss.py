"""Seed-OSS: Llama's decoder with its own bias switches and head size. ``attention_bias``
puts biases on q/k/v only and is on by default, ``attention_out_bias`` on o_proj,
``mlp_bias`` on the MLP; a config.json without head_dim means 128, not hidden / heads
(transformers' SeedOssConfig). Its dropouts are training-only."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.config.options import read_options
from mobius.models.family import ModelFamily
from mobius.models.llama import LlamaForCausalLM
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class SeedOssOptions:
    attention_bias: bool = True
    attention_out_bias: bool = False


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    options = read_options(SeedOssOptions, raw)
    return {"qkv_bias": options.attention_bias, "o_bias": options.attention_out_bias}


def normalize_seed_oss(raw: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim 128 where config.json has none (an explicit null means hidden / heads)."""
    return {"head_dim": 128, **raw}


FAMILY = ModelFamily(
    name="seed_oss", model_types=("seed_oss",), architectures=("SeedOssForCausalLM",),
    module=LlamaForCausalLM, tiny_preset="tiny-seed_oss", config_overrides=_overrides,
    normalize_raw=normalize_seed_oss, cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-seed_oss": {**COMMON, "model_type": "seed_oss", "architectures": ["SeedOssForCausalLM"],
                      "head_dim": 16, "rms_norm_eps": 1e-5, "attention_bias": True,
                      "attention_out_bias": True, "mlp_bias": True},
}
