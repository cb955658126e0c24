"""Qwen2 (bias on Q/K/V, none on O) and Qwen3 (per-head QK RMSNorm, explicit head_dim)."""

from mobius.models.family import ModelFamily
from mobius.models.llama import LlamaForCausalLM

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
