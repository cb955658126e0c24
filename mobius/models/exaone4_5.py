"""EXAONE 4.5 (Exaone4_5_ForConditionalGeneration): Qwen2.5-VL's window-attention vision
tower (mobius/models/qwen2_5_vl_vision.py) with grouped-query attention
(``vision_config.num_key_value_heads``) + the EXAONE 4.0 decoder
(mobius/models/exaone4.py: post-norms, per-head QK norm, RoPE on sliding layers only),
built as the three models of the ``image-text-to-text`` task in the Qwen2.5-VL layout.

What differs from Qwen2.5-VL besides the tower's K/V heads: the decoder's positions are
plain [batch, seq] (no M-RoPE: transformers numbers every token, image tokens included,
one after another), no ``vision_start_token_id`` or ``tokens_per_second``, token ids 67 / 68
by default, the vision rotary must be "axial" (the only kind transformers builds), and the
checkpoint's multi-token-prediction weights (``mtp.*``) are left unread, as transformers does.

onnxruntime-genai 0.18 has no ``exaone4_5`` type and refuses to load the package
(genai_config ``model.type`` is the checkpoint's own, as for LLaVA): its
``qwen2_5_vl`` type takes the same vision inputs and processor but feeds the decoder
3-D M-RoPE positions, which cannot give back EXAONE's 1-D ones. The package runs with
onnxruntime, chained as genai's multi-modal pipeline would (testing/vlm_sessions.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.config.fields import positive_int
from mobius.config.options import reject
from mobius.errors import ConfigError
from mobius.models.exaone4 import Exaone4ForCausalLM, normalize_exaone4
from mobius.models.family import ModelFamily
from mobius.models.qwen2_5_vl import (PROCESSOR_FILE, QWEN_VL_CHECKPOINT_ALIASES,
                                      Qwen2_5_VLForConditionalGeneration, vision_dict)
from mobius.models.qwen2_5_vl_vision import QwenVisionConfig, QwenVisionTransformer
from mobius.tasks import vision_language
from mobius.tiny.bases import COMMON, VOCAB_SIZE
from mobius.weights.attach import IgnoredTensors

#: Exaone4_5_Config's token ids (transformers)
TOKEN_DEFAULTS: Mapping[str, int] = {"image_token_id": 67, "video_token_id": 68}
#: config.json's text_config model_type: transformers reads the first release's as "exaone4"
TEXT_TYPES = ("exaone4", "exaone4_5_text")


@dataclasses.dataclass(frozen=True)
class Exaone45VisionConfig(QwenVisionConfig):
    """Qwen2.5-VL's vision_config (same keys and defaults) + K/V heads."""

    num_key_value_heads: int = 8

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Exaone45VisionConfig":
        kind = (raw.get("rope_parameters") or {}).get("rope_type", "axial")
        reject(kind != "axial", "exaone4_5", f"vision rope_type {kind!r} (axial only)")
        config = dataclasses.replace(super().from_dict(raw), num_key_value_heads=positive_int(
            "vision_config.num_key_value_heads", raw.get("num_key_value_heads", 8)))
        if config.num_heads % config.num_key_value_heads:
            raise ConfigError(f"config.json: vision_config num_heads {config.num_heads} is not "
                              f"a multiple of num_key_value_heads {config.num_key_value_heads}")
        return config

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads


@dataclasses.dataclass(frozen=True)
class Exaone45Options:
    """What the module reads from the normalized config (normalize_exaone4_5)."""

    vision_config: dict | None = None
    image_token_id: int = TOKEN_DEFAULTS["image_token_id"]
    video_token_id: int = TOKEN_DEFAULTS["video_token_id"]


def normalize_exaone4_5(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The decoder's text_config at the top level over the other top-level keys (layer_types
    spelled out as EXAONE 4.0's), the token ids, the top-level tie_word_embeddings (what
    transformers ties by) and the checked vision dict."""
    vision = Exaone45VisionConfig.from_dict(raw.get("vision_config") or {})
    text = dict(raw.get("text_config") or {})
    kind = text.get("model_type", "exaone4")
    reject(kind not in TEXT_TYPES, "exaone4_5", f"text_config model_type {kind!r}")
    top = {k: v for k, v in raw.items() if k not in ("text_config", "vision_config")}
    out = normalize_exaone4({**top, **text})
    out.update({key: int(raw.get(key, default)) for key, default in TOKEN_DEFAULTS.items()})
    return {**out, "model_type": "exaone4_5",
            "architectures": list(raw.get("architectures") or [FAMILY.architectures[0]]),
            "tie_word_embeddings": bool(raw.get("tie_word_embeddings", False)),
            "vision_config": {**vision_dict(vision),
                              "num_key_value_heads": vision.num_key_value_heads}}


class Exaone4_5ForConditionalGeneration(Qwen2_5_VLForConditionalGeneration):
    """The Qwen2.5-VL module protocol with EXAONE's tower and 1-D decoder."""

    vision_config_class = Exaone45VisionConfig
    vision_class = QwenVisionTransformer
    text_class = Exaone4ForCausalLM
    token_keys = tuple(TOKEN_DEFAULTS)

    def genai_model_config(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        vision = self.vision
        return {"video_token_id": self.token_ids["video_token_id"],
                "vision": {"spatial_merge_size": vision.spatial_merge_size,
                           "patch_size": vision.patch_size, "window_size": vision.window_size,
                           "config_filename": PROCESSOR_FILE}}


FAMILY = ModelFamily(
    name="exaone4_5",
    model_types=("exaone4_5",),
    architectures=("Exaone4_5_ForConditionalGeneration",),
    module=Exaone4_5ForConditionalGeneration,
    task=vision_language.TASK,
    tiny_preset="tiny-exaone4_5",
    normalize_raw=normalize_exaone4_5,
    config_overrides=lambda raw: {"qk_norm": True},
    options=Exaone45Options,
    checkpoint_aliases=QWEN_VL_CHECKPOINT_ALIASES,
    ignored_tensors=lambda config: (IgnoredTensors(
        r"(model\.)?mtp\..*", "multi-token-prediction weights (transformers leaves them unread)"),),
)

# EXAONE 4.5: the common decoder as EXAONE 4.0 (layers 0, 1 sliding with RoPE, layer 2 full
# without), a 2-layer vision tower of 2 query heads sharing 1 K/V head (head_dim 16) on 4 px
# patches, 2x2 merge, 2 x 2 merged-token windows, layer 1 full attention.
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-exaone4_5": {
        "model_type": "exaone4_5", "architectures": ["Exaone4_5_ForConditionalGeneration"],
        "image_token_id": VOCAB_SIZE - 1, "video_token_id": VOCAB_SIZE - 2,
        "tie_word_embeddings": False,
        "text_config": {**COMMON, "model_type": "exaone4", "num_hidden_layers": 3,
                        "sliding_window": 4, "rms_norm_eps": 1e-5,
                        "layer_types": ["sliding_attention", "sliding_attention",
                                        "full_attention"]},
        "vision_config": {
            "model_type": "exaone4_5_vision", "depth": 2, "hidden_size": 32,
            "intermediate_size": 40, "num_heads": 2, "num_key_value_heads": 1,
            "in_channels": 3, "patch_size": 4, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "window_size": 16, "fullatt_block_indexes": [1],
            "out_hidden_size": 64, "hidden_act": "silu",
            "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
        },
    },
}
