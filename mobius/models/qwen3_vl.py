"""Qwen3-VL: the Qwen2.5-VL package layout (mobius/models/qwen2_5_vl.py) with
Qwen3-VL's vision tower (mobius/models/qwen3_vl_vision.py) and a Qwen3
decoder (QK norm) whose M-RoPE sections are interleaved, in the layout
onnxruntime-genai's ``qwen3_vl`` type runs.

Deepstack: transformers adds the vision tower's deepstack features (one per
``deepstack_visual_indexes`` entry, D in all) to the hidden states after
decoder layers 0 .. D-1, at the image token positions. genai 0.18 hands the
vision model's one output to the embedding model and the embedding model's
one output to the decoder, each [.., decoder.hidden_size] as genai_config
sizes them. So the package carries the deepstack features beside the
embeddings: image_features and inputs_embeds are hidden * (1 + D) wide
(genai_config decoder ``hidden_size``); chunk 0 is the embedding, chunk k the
feature added after layer k - 1 (zero at text tokens and in decode steps).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import onnx_ir as ir

from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.components.mrope import MRotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.qwen2_5_vl import (QWEN_VL_CHECKPOINT_ALIASES,
                                      Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLTextModel,
                                      QwenVLOptions, normalize_qwen_vl)
from mobius.models.qwen3_vl_vision import Qwen3VisionConfig, Qwen3VisionTransformer
from mobius.tasks import vision_language
from mobius.weights.dtypes import numpy_dtype
from mobius.tiny.bases import VOCAB_SIZE
from mobius.models.qwen2_5_vl import QWEN_VL_TEXT

#: Qwen3VLTextRotaryEmbedding's mrope_section when rope_parameters has none
DEFAULT_SECTION = [24, 20, 20]
#: Qwen3-VL's image processor normalization
HALF = (0.5, 0.5, 0.5)


def normalize_qwen3_vl(raw: Mapping[str, Any]) -> dict[str, Any]:
    """As Qwen2.5-VL's (text_config flattened, plain RoPE + mrope_section), with
    Qwen3-VL's vision_config and default sections."""
    vision = Qwen3VisionConfig.from_dict(raw.get("vision_config") or {})
    vision_raw = {key: getattr(vision, key) for key in Qwen3VisionConfig.__dataclass_fields__}
    vision_raw["deepstack_visual_indexes"] = list(vision.deepstack_visual_indexes)
    return normalize_qwen_vl(raw, "qwen3_vl", "Qwen3VLForConditionalGeneration", vision_raw,
                             DEFAULT_SECTION)


class Qwen3VLTextModel(Qwen2_5_VLTextModel):
    """The Qwen3 decoder reading interleaved M-RoPE streams and, beside the
    embeddings in inputs_embeds, the deepstack features of its first layers."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__(config)
        self.model.rotary_emb_default = MRotaryEmbedding(
            config.rope, config.options.mrope_section, interleaved=True)
        self.deepstack = len(config.options.vision_config["deepstack_visual_indexes"])
        if self.deepstack > config.num_hidden_layers:
            raise ConfigError(f"config.json: {self.deepstack} deepstack_visual_indexes for "
                              f"{config.num_hidden_layers} decoder layers")
        self.inputs_embeds_width = config.hidden_size * (1 + self.deepstack)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values,
                inputs_embeds=None):
        if not self.deepstack:
            return super().forward(op, input_ids, attention_mask, position_ids,
                                   past_key_values, inputs_embeds)
        parts = op.Split(inputs_embeds, num_outputs=1 + self.deepstack, axis=-1,
                         _outputs=1 + self.deepstack)
        return super().forward(op, input_ids, attention_mask, position_ids, past_key_values,
                               parts[0], layer_additions=list(parts[1:]))


class Qwen3VLForConditionalGeneration(Qwen2_5_VLForConditionalGeneration):
    vision_config_class = Qwen3VisionConfig
    vision_class = Qwen3VisionTransformer
    text_class = Qwen3VLTextModel
    processor = ("qwen3_vl_image_processor", HALF, HALF, "qwen3_vl")
    #: the released checkpoints' preprocessor_config.json size (shortest / longest edge)
    pixel_bounds = (65536, 16777216)

    def embed(self, op, input_ids, image_features):
        """The token embeddings, zeros in the deepstack chunks, then the image
        positions replaced by the vision model's features (all chunks)."""
        extra = self.language_model.deepstack * self.hidden_size
        if not extra:
            return super().embed(op, input_ids, image_features)
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        embeds = self.language_model.model.embed_tokens(op, token_ids)  # [batch, seq, hidden]
        zeros = op.ConstantOfShape(
            op.Concat(op.Shape(embeds, start=0, end=2), op.Constant(value_ints=[extra]), axis=0),
            value=ir.tensor(np.zeros([1], dtype=numpy_dtype(get_build_dtype()))))
        wide = op.Concat(embeds, zeros, axis=-1)
        return merge_image_features(op, is_image, wide, image_features,
                                    self.hidden_size + extra)

    def genai_vision_extras(self) -> dict[str, Any]:
        return {}


FAMILY = ModelFamily(
    name="qwen3_vl",
    model_types=("qwen3_vl",),
    architectures=("Qwen3VLForConditionalGeneration",),
    module=Qwen3VLForConditionalGeneration,
    task=vision_language.TASK,
    tiny_preset="tiny-qwen3_vl",
    normalize_raw=normalize_qwen3_vl,
    config_overrides=lambda raw: {"qk_norm": True},
    options=QwenVLOptions,
    checkpoint_aliases=QWEN_VL_CHECKPOINT_ALIASES,
)

# Qwen3-VL (mobius/models/qwen3_vl.py): the common decoder with QK norm and interleaved
# M-RoPE sections 2/3/3; a 3-layer vision tower (LayerNorm, GELU MLP 40) on 4 px patches,
# 2x2 merge, a learned 4x4 position grid, deepstack features of vision layers 0 and 2
# added after decoder layers 0 and 1.
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-qwen3_vl": {
        "model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
        "image_token_id": VOCAB_SIZE - 1, "video_token_id": VOCAB_SIZE - 2,
        "vision_start_token_id": VOCAB_SIZE - 3, "vision_end_token_id": VOCAB_SIZE - 4,
        "tie_word_embeddings": False,
        "text_config": {**QWEN_VL_TEXT, "model_type": "qwen3_vl_text", "head_dim": 16,
                        "attention_bias": False,
                        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                            "mrope_section": [2, 3, 3], "mrope_interleaved": True}},
        "vision_config": {
            "model_type": "qwen3_vl_vision", "depth": 3, "hidden_size": 32,
            "intermediate_size": 40, "num_heads": 2, "in_channels": 3, "patch_size": 4,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
            "num_position_embeddings": 16, "deepstack_visual_indexes": [0, 2],
            "hidden_act": "gelu_pytorch_tanh",
        },
    },
}
