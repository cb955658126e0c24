"""Gemma 4 as released (Gemma4ForConditionalGeneration, model_type "gemma4"): the text
decoder of mobius/models/gemma4.py, built from the nested ``text_config`` and the
checkpoint's ``model.language_model.*`` tensors, as onnxruntime-genai's ``gemma4_text``
package (the peer builds the same component of this checkpoint under that type).

On text input transformers' multimodal model is its decoder: image / audio / video token
ids (outside any text vocabulary) are the only ids it treats otherwise. The vision and
audio towers and their embedders (``model.vision_tower``, ``model.audio_tower``,
``model.embed_vision``, ``model.embed_audio``) are not part of a text decoder: their
tensors are declared unread and their config sections left out of the plausibility check.
"""

from __future__ import annotations

from typing import Any, Mapping

from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.gemma4 import (FAMILY as TEXT, FULL, SLIDING, TINY_PRESETS as TEXT_PRESETS,
                                  Gemma4ForCausalLM)
from mobius.weights.attach import IgnoredTensors

#: the multimodal model's parts a text decoder does not run
TOWERS = ("vision_tower", "audio_tower", "embed_vision", "embed_audio")
UNREAD = tuple(IgnoredTensors(rf"model\.{part}\..*", f"{part} (the text decoder reads only "
                              f"model.language_model)") for part in TOWERS)


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``text_config`` at the top level as the gemma4_text decoder it is (its model_type
    names genai's type); tie_word_embeddings is the outer config's."""
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError("config.json: gemma4: text_config (the decoder's config) is missing")
    tie = raw.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
    out = {**text, "model_type": "gemma4_text", "tie_word_embeddings": tie,
           "architectures": list(raw.get("architectures") or [])}
    return TEXT.normalize_raw(out)


FAMILY = ModelFamily(
    name="gemma4", model_types=("gemma4",), architectures=("Gemma4ForConditionalGeneration",),
    module=Gemma4ForCausalLM, tiny_preset="tiny-gemma4-mm", options=TEXT.options,
    normalize_raw=normalize, config_overrides=TEXT.config_overrides, cohorts=("genai",),
    attention_traits=TEXT.attention_traits, ignored_tensors=lambda config: UNREAD,
    checkpoint_aliases=(("model.", ("model.language_model.", "model.")),),
    unread_config=("vision_config", "audio_config"),
)

_TEXT = {k: v for k, v in TEXT_PRESETS["tiny-gemma4"].items()
         if k not in ("model_type", "architectures", "tie_word_embeddings")}

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # tiny-gemma4's decoder cut to 3 layers (sliding, global, global sharing the first's K/V)
    # with the 26B-A4B feed-forward (4 experts of 40 beside the dense MLP), plus 2-layer
    # vision and 1-layer audio towers the decoder leaves unread. Every expert is chosen: a
    # random router's probabilities lie within 1e-4 of each other (its input is scaled by
    # hidden^-0.5), so a true-bf16 graph would choose other experts than a float32-compute
    # one; gemma4_test checks top-k choice (cases moe, conditional).
    "tiny-gemma4-mm": {
        "model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
        "tie_word_embeddings": True,
        "text_config": {**_TEXT, "model_type": "gemma4_text", "enable_moe_block": True,
                        "num_hidden_layers": 3, "layer_types": [SLIDING, FULL, FULL],
                        "num_kv_shared_layers": 1,
                        "num_experts": 4, "top_k_experts": 4, "moe_intermediate_size": 40},
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 48,
                          "intermediate_size": 96, "num_hidden_layers": 2,
                          "num_attention_heads": 3, "num_key_value_heads": 3, "head_dim": 16,
                          "patch_size": 4, "pooling_kernel_size": 2,
                          "position_embedding_size": 64},
        "audio_config": {"model_type": "gemma4_audio", "hidden_size": 40,
                         "num_hidden_layers": 1, "num_attention_heads": 2,
                         "subsampling_conv_channels": [8, 4], "output_proj_dims": 40,
                         "attention_chunk_size": 4, "attention_context_left": 5},
    },
}
