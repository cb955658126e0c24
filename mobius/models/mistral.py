"""Mistral: the Llama architecture with optional sliding-window attention."""

from mobius.models.family import ModelFamily
from mobius.models.llama import LlamaForCausalLM
from mobius.tiny.bases import COMMON

FAMILY = ModelFamily(
    name="mistral",
    model_types=("mistral",),
    architectures=("MistralForCausalLM",),
    module=LlamaForCausalLM,
    tiny_preset="tiny-mistral",
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-mistral": {
        **COMMON,
        "model_type": "mistral",
        "architectures": ["MistralForCausalLM"],
        "sliding_window": 8,
    },
}
