"""Marian (Helsinki-NLP opus-mt translation models, text2text-generation): BART's
post-norm encoder-decoder (mobius/models/bart.py) with

* sinusoidal positions instead of a learned table: transformers computes them at load
  time and never saves them, so the build computes the same float64 table (sines of
  the even frequencies in the first half of each row, cosines in the second), rounds it
  to the build dtype and stores it as a constant; positions start at 0 (no offset);
* no ``layernorm_embedding``;
* transformers' MarianConfig defaults (scale_embedding false in the class, true in the
  opus-mt configs; ``final_logits_bias`` on the head).

Only shared source/target vocabularies are supported (``share_encoder_decoder_embeddings``,
as in every opus-mt checkpoint); a separate ``decoder_vocab_size`` is refused.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from onnxscript import nn

from mobius.components.weight import constant
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models import bart
from mobius.models.family import ModelFamily
from mobius.tasks import text2text
from mobius.weights.attach import IgnoredTensors
from mobius.weights.dtypes import numpy_dtype
from mobius.tiny.bases import VOCAB_SIZE

#: transformers' MarianConfig defaults, for keys a config.json leaves out.
_MARIAN_DEFAULTS: Mapping[str, Any] = {
    "vocab_size": 58101, "max_position_embeddings": 1024, "encoder_layers": 12,
    "encoder_ffn_dim": 4096, "encoder_attention_heads": 16, "decoder_layers": 12,
    "decoder_ffn_dim": 4096, "decoder_attention_heads": 16, "activation_function": "gelu",
    "d_model": 1024, "scale_embedding": False, "pad_token_id": 58100, "eos_token_id": 0,
    "decoder_start_token_id": 58100, "tie_word_embeddings": True,
    "share_encoder_decoder_embeddings": True,
}


def normalize_marian(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = {**_MARIAN_DEFAULTS, **raw}
    decoder_vocab = out.get("decoder_vocab_size")
    if not out["share_encoder_decoder_embeddings"] or decoder_vocab not in (None, out["vocab_size"]):
        raise ConfigError("marian: separate source and target vocabularies "
                          "(share_encoder_decoder_embeddings false) are not supported")
    return bart.normalize_bart(out)


def sinusoids(num_positions: int, dim: int) -> np.ndarray:
    """Marian's position table [num_positions, dim], float64 (sin half, then cos half)."""
    exponents = 2 * (np.arange(dim) // 2) / dim
    angles = np.arange(num_positions)[:, None] / np.power(10000.0, exponents)[None, :]
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)


class SinusoidalPositions(nn.Module):
    def __init__(self, num_positions: int, dim: int):
        super().__init__()
        table = sinusoids(num_positions, dim).astype(np.float32)
        self.weight = constant(table.astype(numpy_dtype(get_build_dtype())), "weight")

    def forward(self, op, positions):
        return op.Gather(self.weight, positions, axis=0)


def _module(config: ArchitectureConfig) -> bart.BartForConditionalGeneration:
    return bart.BartForConditionalGeneration(
        config, positions=lambda: SinusoidalPositions(config.max_position_embeddings,
                                                      config.hidden_size))


FAMILY = ModelFamily(
    name="marian",
    model_types=("marian",),
    architectures=("MarianMTModel",),
    module=_module,
    task=text2text.TASK,
    tiny_preset="tiny-marian",
    normalize_raw=normalize_marian,
    config_overrides=bart.FAMILY.config_overrides,
    options=bart.BartOptions,
    checkpoint_aliases=bart.FAMILY.checkpoint_aliases,
    ignored_tensors=lambda config: (
        *bart.FAMILY.ignored_tensors(config),
        IgnoredTensors(r"model\.(encoder|decoder)\.embed_positions\.weight",
                       "older opus-mt files save the sinusoids; they are recomputed"),
    ),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Marian (opus-mt): BART's shape with sinusoidal positions, swish, no embedding norm.
    "tiny-marian": {
        "model_type": "marian", "architectures": ["MarianMTModel"],
        "vocab_size": VOCAB_SIZE, "d_model": 48, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 6, "encoder_ffn_dim": 100,
        "decoder_ffn_dim": 88, "max_position_embeddings": 40, "activation_function": "swish",
        "scale_embedding": True, "pad_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 0, "forced_eos_token_id": None, "tie_word_embeddings": True,
    },
}
