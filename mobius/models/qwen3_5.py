"""Qwen 3.5 (dense): Qwen3-Next's hybrid of gated DeltaNet and gated-attention layers
with a dense MLP on every layer.

The layers are Qwen3-Next's (mobius/models/qwen3_next.py): ``layer_types`` (default:
every ``full_attention_interval``-th layer attention) picks gated DeltaNet or gated
attention with per-head (1 + w) Q/K RMSNorm and partial RoPE (0.25 by default). The
DeltaNet's projections are unfused in the checkpoint (``in_proj_qkv``, ``in_proj_z``,
``in_proj_b``, ``in_proj_a``). The attention's rotary is M-RoPE (``mrope_section``,
``mrope_interleaved``), whose three position streams are all the text position for
text: that is plain RoPE, so a text decoder reads [batch, seq] position_ids, as
onnxruntime-genai's ``qwen3_5_text`` type feeds them. Checkpoints may ship a
multi-token-prediction head (``mtp.*``), which the causal LM does not read (``--mtp``
builds it as genai's drafter: ``mtp_head``), and may name
the decoder as the multimodal model does (``model.language_model.*``, beside a vision
tower ``model.visual.*`` that a text decoder leaves unread), as transformers loads them.
The multimodal model as released (``qwen3_5``) is mobius/models/qwen3_5_vl.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from onnxscript import nn

from mobius.components.mlp import GatedMLP
from mobius.components.mtp_head import MtpHead
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.models.family import ModelFamily
from mobius.models.qwen3_next import (FULL, Qwen3NextDecoderLayer, Qwen3NextForCausalLM,
                                      delta_net_dims, normalize, offset_rms_norm)
from mobius.tiny.bases import COMMON
from mobius.weights.attach import IgnoredTensors

#: the multi-token-prediction head some checkpoints ship (a drafter, not the causal LM)
MTP = IgnoredTensors(r"mtp\..*", "multi-token-prediction head (not used by the causal LM)")
#: what a text decoder leaves unread: the MTP head and a multimodal checkpoint's vision tower
UNREAD = (MTP, IgnoredTensors(r"model\.visual\..*", "vision tower (not used by the text decoder)"))
#: the decoder under the multimodal model's name, as transformers' qwen3_5_text mapping reads it
ALIASES = (("model.", ("model.", "model.language_model.")),)


@dataclasses.dataclass(frozen=True)
class Qwen3_5Options:
    """The DeltaNet switches, with transformers' Qwen3_5TextConfig defaults."""

    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32


def dense_mlp(config: ArchitectureConfig, layer: int) -> nn.Module:
    return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)


class Qwen3_5ForCausalLM(Qwen3NextForCausalLM):
    def __init__(self, config: ArchitectureConfig):
        super().__init__(config, mlp=dense_mlp, fused_projections=False)


def mtp_head(config: ArchitectureConfig) -> MtpHead:
    """The ``mtp.*`` head: one gated-attention layer (Qwen3-Next's) and (1 + w) norms."""
    one_layer = dataclasses.replace(config, num_hidden_layers=1, layer_types=(FULL,))
    layer = Qwen3NextDecoderLayer(one_layer, 0, dense_mlp(one_layer, 0), fused_projections=False)
    return MtpHead(one_layer, layer, lambda size: offset_rms_norm(config, size))


def checked_by(options: type) -> Callable[[Mapping[str, Any]], dict]:
    """config_overrides: the DeltaNet switches checked before any weight is read."""
    def checked(raw: Mapping[str, Any]) -> dict:
        delta_net_dims(read_options(options, raw),
                       positive_int("hidden_size", raw.get("hidden_size")))
        return {}
    return checked


FAMILY = ModelFamily(
    name="qwen3_5_text", model_types=("qwen3_5_text",), architectures=("Qwen3_5ForCausalLM",),
    module=Qwen3_5ForCausalLM, tiny_preset="tiny-qwen3_5", options=Qwen3_5Options,
    normalize_raw=normalize, config_overrides=checked_by(Qwen3_5Options), cohorts=("genai",),
    ignored_tensors=lambda config: UNREAD, checkpoint_aliases=ALIASES, mtp_head=mtp_head,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # DeltaNet, DeltaNet, gated attention (4 heads of 16, 2 KV heads, RoPE on a quarter of
    # each head, M-RoPE sections as released checkpoints spell them), DeltaNet: 2 key heads
    # of 12 serving 6 value heads of 20, conv 4; a dense MLP of 172 on every layer.
    "tiny-qwen3_5": {
        **COMMON, "model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"],
        "num_hidden_layers": 4, "head_dim": 16,
        "layer_types": ["linear_attention", "linear_attention", "full_attention",
                        "linear_attention"],
        "linear_num_key_heads": 2, "linear_num_value_heads": 6, "linear_key_head_dim": 12,
        "linear_value_head_dim": 20, "linear_conv_kernel_dim": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                            "mrope_interleaved": True},
    },
}
