"""InternLM3: Llama's decoder. Its hub config.json spells the bias switches ``qkv_bias``
(q/k/v/o, transformers' attention_bias) and ``bias`` (the MLP, mlp_bias), and a
config.json without head_dim means 128, not hidden / heads (transformers'
InternLM3Config, which builds it as LlamaForCausalLM)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.config.options import read_options, reject
from mobius.models.family import ModelFamily
from mobius.models.llama import LlamaForCausalLM
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class InternLM3Options:
    attention_bias: bool = dataclasses.field(default=False, metadata={"key": "qkv_bias"})
    mlp_bias: bool = dataclasses.field(default=False, metadata={"key": "bias"})


def normalize_internlm3(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The hub spellings as transformers' keys; head_dim 128 where config.json has none.

    transformers refuses q/k/v/o and MLP biases that differ (its Llama layers share one
    switch for the attention projections): so does mobius, having no reference for it.
    """
    spelled = read_options(InternLM3Options, raw)
    out = {"head_dim": 128, **raw}
    out.setdefault("attention_bias", spelled.attention_bias)
    out.setdefault("mlp_bias", spelled.mlp_bias)
    reject(out["attention_bias"] != out["mlp_bias"], "internlm3",
           f"qkv_bias {out['attention_bias']} with bias {out['mlp_bias']}")
    return out


FAMILY = ModelFamily(
    name="internlm3", model_types=("internlm3",), architectures=("InternLM3ForCausalLM",),
    module=LlamaForCausalLM, tiny_preset="tiny-internlm3", normalize_raw=normalize_internlm3,
    cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json (the hub
#: spelling of the bias switches)
TINY_PRESETS = {
    "tiny-internlm3": {**COMMON, "model_type": "internlm3",
                       "architectures": ["InternLM3ForCausalLM"], "head_dim": 16,
                       "rms_norm_eps": 1e-5, "qkv_bias": True, "bias": True},
}
