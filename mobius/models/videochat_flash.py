"""VideoChat-Flash (OpenGVLab/VideoChat-Flash-Qwen*, VideoChatFlashQwenForCausalLM): its
Qwen2 language model, as a text-generation package.

The checkpoint ships ``auto_map`` code (modeling_videochat_flash.py, a LLaVA-style
video model) that mobius never runs: it builds from config.json + safetensors. The
language model is transformers' Qwen2 under its own names (``model.embed_tokens``,
``model.layers.{i}`` with Q/K/V biases, ``model.norm``, ``lm_head`` unless tied), read
with Qwen2's switches from the top level of config.json, where the ``mm_*`` video
settings sit beside them.

Left out, each declared unread (the error names any other tensor): the video tower
(``model.vision_tower.*``), the projector (``model.mm_projector.*``) and the newline
embeddings the projector's output is laid out with (``model.image_newline``,
``model.frame_newline``). ``mm_llm_compress`` (dropping video tokens between decoder
layers during the prefill) is refused: it changes what the decoder computes.

genai_config's type is genai's generic ``decoder``: onnxruntime-genai 0.18's
``videochat_flash_qwen`` type is its video pipeline (vision and embedding models beside
the decoder): og.Model refuses a decoder-only package of that type (measured), which is
what ORT GenAI's builder writes for these checkpoints.

Peer check (measured once, not a test): ORT GenAI 0.18's builder reads config.json with
transformers' AutoConfig, which refuses this checkpoint without running its auto_map code;
on a copy with model_type ``qwen2`` and no auto_map (``-p fp32 -e cpu``; its type is then
``qwen2``) its logits and mobius' cpu package's agree to 6.0e-7 (logits up to 1.6) over a
6-token prompt, and genai greedy-decodes the same tokens from both.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options, reject
from mobius.models.family import ModelFamily
from mobius.models.llama import LlamaForCausalLM
from mobius.tiny.bases import COMMON
from mobius.weights.attach import IgnoredTensors


@dataclasses.dataclass(frozen=True)
class VideoChatFlashOptions:
    #: drop video tokens inside the decoder during the prefill (the checkpoints' default off)
    mm_llm_compress: bool = False


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen2's biases (Q/K/V, none on O); the switches checked."""
    o = read_options(VideoChatFlashOptions, raw)
    reject(o.mm_llm_compress, "videochat_flash_qwen",
           "mm_llm_compress (video tokens dropped between decoder layers)")
    return {"qkv_bias": True, "o_bias": False}


def _unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    reason = "the video tower and projector around the Qwen2 decoder: the package is its text"
    return (IgnoredTensors(r"model\.(vision_tower|mm_projector)\..*", reason),
            IgnoredTensors(r"model\.(image|frame)_newline", reason))


FAMILY = ModelFamily(
    name="videochat_flash_qwen", model_types=("videochat_flash_qwen",),
    architectures=("VideoChatFlashQwenForCausalLM",), module=LlamaForCausalLM,
    config_overrides=_overrides, options=VideoChatFlashOptions, ignored_tensors=_unread,
    tiny_preset="tiny-videochat_flash",
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json, in the hub
#: layout (auto_map names the checkpoint's own code, which mobius does not run); the
#: ``mm_*`` keys of VideoChat-Flash-Qwen2_5-2B_res448, at tiny sizes
TINY_PRESETS = {
    "tiny-videochat_flash": {
        **COMMON, "model_type": "videochat_flash_qwen",
        "architectures": ["VideoChatFlashQwenForCausalLM"],
        "auto_map": {"AutoConfig": "modeling_videochat_flash.VideoChatFlashQwenConfig",
                     "AutoModel": "modeling_videochat_flash.VideoChatFlashQwenForCausalLM"},
        "tie_word_embeddings": False, "use_sliding_window": False, "rope_scaling": None,
        "mm_vision_tower": "umt-hd-large", "mm_projector_type": "tome16_mlp_hd64",
        "mm_hidden_size": 40, "mm_local_num_frames": 4, "mm_newline_position": "nothing",
        "mm_patch_merge_type": "spatial_nopad", "mm_llm_compress": False,
        "mm_spatial_pool_mode": "bilinear", "mm_vision_select_layer": -2,
    },
}
