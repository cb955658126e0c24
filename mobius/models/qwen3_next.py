"""Qwen3-Next: gated DeltaNet and gated-attention layers, sparse MoE with a shared expert.

``layer_types`` (default: every ``full_attention_interval``-th layer attention, the
rest linear attention) picks each layer's mixer: gated DeltaNet
(mobius/components/gated_delta_net.py, ``linear_attn``) or attention whose q_proj
also makes a sigmoid output gate, with per-head Q/K RMSNorm and partial RoPE
(``partial_rotary_factor``, 0.25 by default). Every RMSNorm but the DeltaNet's
output norm scales by (1 + weight). The feed-forward is Qwen2-MoE's: sparse experts
plus a shared expert scaled by sigmoid(shared_expert_gate(x)) on the layers
``decoder_sparse_step`` / ``mlp_only_layers`` pick (all dense when
``num_experts`` is 0). DeltaNet layers carry ``conv_state`` and
``recurrent_state`` instead of a KV cache (mobius/tasks/causal_lm.py). Released
checkpoints also ship a multi-token-prediction head (``mtp.*``), left unread as
transformers does; ``--mtp`` does not build it yet (Qwen 3.5's does).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from onnxscript import nn

from mobius.components.attention import Attention
from mobius.components.causal_transformer import CausalLM
from mobius.components.gated_delta_net import DeltaNetDims, GatedDeltaNet
from mobius.components.hybrid_transformer import HybridCausalTransformer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.config.rope import with_partial_rotary_default
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.qwen_moe import QwenMoeOptions, moe_mlp
from mobius.tiny.bases import COMMON
from mobius.weights.attach import IgnoredTensors

LINEAR, FULL = "linear_attention", "full_attention"


@dataclasses.dataclass(frozen=True)
class Qwen3NextOptions(QwenMoeOptions):
    """config.json switches beyond Qwen2-MoE's, with transformers' Qwen3NextConfig defaults."""

    norm_topk_prob: bool = True
    num_experts: int | None = 512
    linear_conv_kernel_dim: int = 4
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' defaults: partial RoPE 0.25; layer kinds from full_attention_interval."""
    raw = with_partial_rotary_default(raw, 0.25)
    layers = positive_int("num_hidden_layers", raw.get("num_hidden_layers"))
    if raw.get("layer_types") is None:
        interval = positive_int("full_attention_interval", raw.get("full_attention_interval", 4))
        raw["layer_types"] = [FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers)]
    bad = sorted({str(k) for k in raw["layer_types"]} - {LINEAR, FULL})
    if bad:
        raise ConfigError(f"config.json: layer_types must be {LINEAR!r} or {FULL!r}, "
                          f"got {bad}")
    return raw


def delta_net_dims(o: Qwen3NextOptions, hidden: int) -> DeltaNetDims:
    """The DeltaNet sizes from the linear_* switches (Qwen 3.5 spells them the same)."""
    key_heads = positive_int("linear_num_key_heads", o.linear_num_key_heads)
    value_heads = positive_int("linear_num_value_heads", o.linear_num_value_heads)
    if value_heads % key_heads:
        raise ConfigError(f"config.json: linear_num_value_heads ({value_heads}) must be a "
                          f"multiple of linear_num_key_heads ({key_heads})")
    kernel = positive_int("linear_conv_kernel_dim", o.linear_conv_kernel_dim)
    if kernel < 2:
        raise ConfigError(f"config.json: linear_conv_kernel_dim ({kernel}) must be at least 2 "
                          f"(a carried convolution state of kernel - 1 positions)")
    return DeltaNetDims(hidden, key_heads, value_heads,
                        positive_int("linear_key_head_dim", o.linear_key_head_dim),
                        positive_int("linear_value_head_dim", o.linear_value_head_dim), kernel)


def _norm(config: ArchitectureConfig, size: int) -> RMSNorm:
    return RMSNorm(size, config.rms_norm_eps, weight_offset=1.0)


#: the (1 + w) RMSNorm of every norm but the DeltaNet's output norm (for Qwen 3.5's MTP head)
offset_rms_norm = _norm


def gated_attention(config: ArchitectureConfig) -> Attention:
    d = config.head_dim
    return Attention(config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
                     d, config.rope.rotary_dim, qkv_bias=config.qkv_bias, o_bias=config.o_bias,
                     q_norm=_norm(config, d), k_norm=_norm(config, d), output_gate=True)


def feed_forward(config: ArchitectureConfig, layer: int) -> nn.Module:
    if config.options.num_experts == 0:
        return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
    return moe_mlp(config, layer, shared_expert=True)


class Qwen3NextDecoderLayer(nn.Module):
    """x + mixer(norm(x)), then x + mlp(norm(x)); the mixer is linear_attn or self_attn."""

    def __init__(self, config: ArchitectureConfig, layer: int, mlp: nn.Module,
                 fused_projections: bool = True):
        super().__init__()
        linear = config.layer_types[layer] == LINEAR
        self.linear_attn = GatedDeltaNet(
            delta_net_dims(config.options, config.hidden_size), eps=config.rms_norm_eps,
            activation=config.hidden_act, fused_projections=fused_projections) if linear else None
        self.self_attn = None if linear else gated_attention(config)
        self.mlp = mlp
        self.input_layernorm = _norm(config, config.hidden_size)
        self.post_attention_layernorm = _norm(config, config.hidden_size)

    def forward(self, op, hidden, cos, sin, mask, *past):
        normed = self.input_layernorm(op, hidden)
        if self.linear_attn is not None:
            out, *present = self.linear_attn(op, normed, mask, *past)
        else:
            out, *present = self.self_attn(op, normed, cos, sin, mask, *past)
        hidden = op.Add(hidden, out)
        hidden = op.Add(hidden, self.mlp(op, self.post_attention_layernorm(op, hidden)))
        return (hidden, *present)


class Qwen3NextForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig, *,
                 mlp: Callable[[ArchitectureConfig, int], nn.Module] = feed_forward,
                 fused_projections: bool = True):
        """mlp: layer i's feed-forward; fused_projections: the DeltaNet's checkpoint layout
        (mobius/components/gated_delta_net.py), for Qwen 3.5 which reuses this body."""
        kinds = config.layer_types
        layers = [Qwen3NextDecoderLayer(config, i, mlp(config, i), fused_projections)
                  for i in range(config.num_hidden_layers)]
        recurrent = [i for i, kind in enumerate(kinds) if kind == LINEAR]
        model = HybridCausalTransformer(
            config, layers, _norm(config, config.hidden_size), recurrent,
            layer_rope_kinds=["default" if k == FULL else None for k in kinds])
        super().__init__(config, model)
        dims = delta_net_dims(config.options, config.hidden_size)
        self.recurrent_states = {i: dims.state_dims() for i in recurrent}


def checked(raw: Mapping[str, Any]) -> dict:
    """config_overrides: the DeltaNet switches checked before any weight is read."""
    delta_net_dims(read_options(Qwen3NextOptions, raw), positive_int("hidden_size",
                                                                     raw.get("hidden_size")))
    return {}


FAMILY = ModelFamily(
    name="qwen3_next", model_types=("qwen3_next",), architectures=("Qwen3NextForCausalLM",),
    module=Qwen3NextForCausalLM, tiny_preset="tiny-qwen3_next", options=Qwen3NextOptions,
    normalize_raw=normalize, config_overrides=checked, cohorts=("genai",),
    ignored_tensors=lambda config: (IgnoredTensors(
        r"mtp\..*", "multi-token-prediction head (not used by the causal LM)"),),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # 3 DeltaNet layers (2 key heads of 12, 4 value heads of 20, conv 4) then one gated
    # attention layer (4 heads of 16, 2 KV heads, RoPE on a quarter of each head);
    # 5 experts of 36 (top 2, renormalized) + a shared expert of 52 on layers 0, 2 and 3
    # (mlp_only_layers [1]: a dense MLP of 172).
    "tiny-qwen3_next": {
        **COMMON, "model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"],
        "num_hidden_layers": 4, "head_dim": 16, "full_attention_interval": 4,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 12,
        "linear_value_head_dim": 20, "linear_conv_kernel_dim": 4, "num_experts": 5,
        "num_experts_per_tok": 2, "moe_intermediate_size": 36,
        "shared_expert_intermediate_size": 52, "decoder_sparse_step": 1, "mlp_only_layers": [1],
        "norm_topk_prob": True, "partial_rotary_factor": 0.25,
    },
}
