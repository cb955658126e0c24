"""Qwen2 (bias on Q/K/V, none on O) and Qwen3 (per-head QK RMSNorm, explicit head_dim)."""

from mobius.models.family import ModelFamily
from mobius.models.llama import LlamaForCausalLM
from mobius.tiny.bases import COMMON

QWEN2 = ModelFamily(
    name="qwen2",
    model_types=("qwen2",),
    architectures=("Qwen2ForCausalLM",),
    module=LlamaForCausalLM,
    config_overrides=lambda raw: {"qkv_bias": True, "o_bias": False},
    tiny_preset="tiny-qwen2",
)

QWEN3 = ModelFamily(
    name="qwen3",
    model_types=("qwen3",),
    architectures=("Qwen3ForCausalLM",),
    module=LlamaForCausalLM,
    config_overrides=lambda raw: {"qk_norm": True},
    tiny_preset="tiny-qwen3",
)

#: what the registry reads from this module, in lookup order
FAMILIES = (QWEN2, QWEN3)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-qwen2": {
        **COMMON,
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "tie_word_embeddings": True,
        "use_sliding_window": False,
    },
    "tiny-qwen3": {
        **COMMON,
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "head_dim": 32,
        "tie_word_embeddings": True,
    },
}
