"""Qwen 3.5 dense and MoE as released (Qwen3_5ForConditionalGeneration,
Qwen3_5MoeForConditionalGeneration): Qwen3-VL's package layout and vision tower
(mobius/models/qwen3_vl.py, qwen3_vl_vision.py) without deepstack, and Qwen 3.5's
gated DeltaNet / gated-attention decoder (mobius/models/qwen3_5.py, qwen3_5_moe.py)
reading inputs_embeds and interleaved M-RoPE streams [3, batch, seq] on its partial
rotary dims, in the layout onnxruntime-genai's ``qwen3_5`` / ``qwen3_5_moe`` types run
(its Qwen-VL pipeline: 3-D positions; the DeltaNet layers' conv and recurrent states
found by name, as for its ``qwen3_5_text`` type).

config.json nests the decoder in ``text_config`` (Qwen3-Next's keys) and the tower in
``vision_config`` (Qwen3-VL's keys, no ``deepstack_visual_indexes``). A checkpoint's
multi-token-prediction head (``mtp.*``) is a drafter the package does not read.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from mobius.components.mrope import STREAMS, MRotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.models.qwen2_5_vl import QWEN_VL_CHECKPOINT_ALIASES, QwenVLOptions, normalize_qwen_vl
from mobius.models.qwen3_5 import (MTP, TINY_PRESETS as DENSE, Qwen3_5ForCausalLM,
                                   Qwen3_5Options, checked_by)
from mobius.models.qwen3_5_moe import (TINY_PRESETS as MOE, Qwen3_5MoeForCausalLM,
                                       Qwen3_5MoeOptions, checked as moe_checked, normalize_moe)
from mobius.models.qwen3_next import normalize
from mobius.models.qwen3_vl import TINY_PRESETS as QWEN3_VL, Qwen3VLForConditionalGeneration
from mobius.models.qwen3_vl_vision import Qwen3VisionConfig
from mobius.tasks import vision_language
from mobius.tiny.bases import VOCAB_SIZE

#: Qwen3_5TextRotaryEmbedding's mrope_section when rope_parameters has none
DEFAULT_SECTION = [11, 11, 10]
#: Qwen3_5Config's token ids (transformers), for keys config.json leaves out
TOKEN_DEFAULTS = {"image_token_id": 248056, "video_token_id": 248057,
                  "vision_start_token_id": 248053}


@dataclasses.dataclass(frozen=True)
class Qwen3_5VLOptions(Qwen3_5Options, QwenVLOptions):
    """The DeltaNet switches and what the Qwen-VL modules read."""


@dataclasses.dataclass(frozen=True)
class Qwen3_5MoeVLOptions(Qwen3_5MoeOptions, QwenVLOptions):
    """The DeltaNet and MoE switches and what the Qwen-VL modules read."""


def with_mrope(decoder, config: ArchitectureConfig) -> None:
    """The decoder's RoPE as interleaved M-RoPE over [3, batch, seq] positions."""
    decoder.model.rotary_emb_default = MRotaryEmbedding(
        config.rope, config.options.mrope_section, interleaved=True)


class Qwen3_5VLTextModel(Qwen3_5ForCausalLM):
    position_streams = STREAMS
    deepstack = 0  # Qwen3-VL's embedding model reads it: no deepstack chunks

    def __init__(self, config: ArchitectureConfig):
        super().__init__(config)
        with_mrope(self, config)


class Qwen3_5MoeVLTextModel(Qwen3_5MoeForCausalLM):
    position_streams = STREAMS
    deepstack = 0

    def __init__(self, config: ArchitectureConfig):
        super().__init__(config)
        with_mrope(self, config)


class Qwen3_5VLForConditionalGeneration(Qwen3VLForConditionalGeneration):
    text_class = Qwen3_5VLTextModel


class Qwen3_5MoeVLForConditionalGeneration(Qwen3VLForConditionalGeneration):
    text_class = Qwen3_5MoeVLTextModel


def normalized(model_type: str, architecture: str,
               text: Callable[[Mapping[str, Any]], dict[str, Any]]):
    """normalize_raw: text_config flattened (Qwen-VL's M-RoPE reading), then the decoder's
    own defaults (``text``); the tower as Qwen3-VL's with no deepstack layers."""
    def flattened(raw: Mapping[str, Any]) -> dict[str, Any]:
        vision = Qwen3VisionConfig.from_dict(
            {**(raw.get("vision_config") or {}), "deepstack_visual_indexes": []})
        vision_raw = {key: getattr(vision, key) for key in Qwen3VisionConfig.__dataclass_fields__}
        vision_raw["deepstack_visual_indexes"] = []
        return text(normalize_qwen_vl({**TOKEN_DEFAULTS, **raw}, model_type, architecture,
                                      vision_raw, DEFAULT_SECTION))
    return flattened


def _family(name: str, model_type: str, architecture: str, module, options, text, checked):
    return ModelFamily(
        name=name, model_types=(model_type,), architectures=(architecture,), module=module,
        cohorts=("every-dtype",),
        task=vision_language.TASK, tiny_preset=f"tiny-{name}_vl", options=options,
        normalize_raw=normalized(model_type, architecture, text), config_overrides=checked,
        ignored_tensors=lambda config: (MTP,), checkpoint_aliases=QWEN_VL_CHECKPOINT_ALIASES,
    )


FAMILIES = (
    _family("qwen3_5", "qwen3_5", "Qwen3_5ForConditionalGeneration",
            Qwen3_5VLForConditionalGeneration, Qwen3_5VLOptions, normalize,
            checked_by(Qwen3_5VLOptions)),
    _family("qwen3_5_moe", "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration",
            Qwen3_5MoeVLForConditionalGeneration, Qwen3_5MoeVLOptions, normalize_moe,
            moe_checked),
)


def _preset(text_preset: Mapping[str, Any], model_type: str, architecture: str) -> dict:
    text = {k: v for k, v in text_preset.items() if k != "architectures"}
    text["rope_parameters"] = {**text["rope_parameters"], "partial_rotary_factor": 0.75,
                               "mrope_section": [2, 2, 2]}
    return {
        "model_type": model_type, "architectures": [architecture],
        "image_token_id": VOCAB_SIZE - 1, "video_token_id": VOCAB_SIZE - 2,
        "vision_start_token_id": VOCAB_SIZE - 3, "vision_end_token_id": VOCAB_SIZE - 4,
        "tie_word_embeddings": False, "text_config": text,
        "vision_config": {**VISION, "model_type": f"{model_type}_vision",
                          "out_hidden_size": text["hidden_size"]},
    }


#: Qwen3-VL's tiny tower (3 layers, 4 px patches, 2x2 merge, a 4x4 position grid) without
#: its deepstack layers
VISION = {k: v for k, v in QWEN3_VL["tiny-qwen3_vl"]["vision_config"].items()
          if k not in ("deepstack_visual_indexes", "model_type")}
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json: the text
#: presets of Qwen 3.5 dense / MoE (DeltaNet x2, gated attention, DeltaNet) in text_config,
#: RoPE on 3/4 of each head so that every M-RoPE stream has 2 interleaved frequencies
TINY_PRESETS = {
    "tiny-qwen3_5_vl": _preset(DENSE["tiny-qwen3_5"], "qwen3_5",
                               "Qwen3_5ForConditionalGeneration"),
    "tiny-qwen3_5_moe_vl": _preset(MOE["tiny-qwen3_5_moe"], "qwen3_5_moe",
                                   "Qwen3_5MoeForConditionalGeneration"),
}
