"""Mistral: the Llama architecture with optional sliding-window attention."""

from mobius.models.family import ModelFamily
from mobius.models.llama import LlamaForCausalLM

FAMILY = ModelFamily(
    name="mistral",
    model_types=("mistral",),
    architectures=("MistralForCausalLM",),
    module=LlamaForCausalLM,
    tiny_preset="tiny-mistral",
)
