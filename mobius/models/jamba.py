"""Jamba (``model_type: jamba``): Mamba (v1) layers interleaved with attention, sparse MoE on some.

Layer i attends when ``i % attn_layer_period == attn_layer_offset`` (multi-head
attention with no position encoding at all), else it is a Mamba mixer
(mobius/components/mamba.py) whose time-step features, B and C are RMS-normalized
after x_proj. Its feed-forward is a sparse MoE when ``i % expert_layer_period ==
expert_layer_offset`` and ``num_experts`` > 1 (softmax, the top ``num_experts_per_tok`` weights left
unnormalized; the router is ``feed_forward.router``), else
a SiLU-gated MLP. Each layer is pre-norm twice: x + mixer(norm(x)), then
x + ff(norm(x)). Attention layers keep a KV cache, Mamba layers ``conv_state`` /
``recurrent_state`` (mobius/tasks/causal_lm.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM
from mobius.components.hybrid_transformer import HybridCausalTransformer
from mobius.components.mamba import MambaDims, MambaMixer
from mobius.components.mlp import GatedMLP
from mobius.components.moe import SparseMoE
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight, transpose
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.mixtral import moe_int
from mobius.models.llama import llama_attention
from mobius.models.mamba import MambaOptions, mamba_dims
from mobius.tiny.bases import VOCAB_SIZE

#: Jamba's config.json keys of the Mamba fields (mobius/models/mamba.py's MambaOptions)
MAMBA_KEYS = {"state_size": "mamba_d_state", "expand": "mamba_expand",
              "conv_kernel": "mamba_d_conv", "time_step_rank": "mamba_dt_rank"}


@dataclasses.dataclass(frozen=True)
class JambaOptions:
    attn_layer_period: int = 8
    attn_layer_offset: int = 4
    expert_layer_period: int = 2
    expert_layer_offset: int = 1
    num_local_experts: int = dataclasses.field(default=16, metadata={"key": "num_experts"})
    num_experts_per_tok: int = 2
    mamba_d_state: int = 16
    mamba_d_conv: int = 4
    mamba_expand: int = 2
    mamba_dt_rank: int | str = "auto"  # "auto": ceil(hidden_size / 16)
    mamba_conv_bias: bool = True
    mamba_proj_bias: bool = False


def _periodic(o: JambaOptions, what: str, layer: int) -> bool:
    """transformers' layer pattern: layer % {what}_layer_period == {what}_layer_offset."""
    period, offset = getattr(o, f"{what}_layer_period"), getattr(o, f"{what}_layer_offset")
    return layer % period == offset


def _checked(o: JambaOptions) -> None:
    experts = moe_int("num_experts", o.num_local_experts)
    if experts > 1 and moe_int("num_experts_per_tok", o.num_experts_per_tok) > experts:
        raise ConfigError(f"config.json: num_experts_per_tok ({o.num_experts_per_tok}) "
                          f"exceeds num_experts ({experts})")
    for what in ("attn", "expert"):
        period = positive_int(f"{what}_layer_period", getattr(o, f"{what}_layer_period"))
        offset = getattr(o, f"{what}_layer_offset")
        if not 0 <= offset < period:
            raise ConfigError(f"config.json: {what}_layer_offset ({offset}) must be in "
                              f"0..{what}_layer_period - 1 ({period - 1})")


def _mamba_dims(o: JambaOptions, hidden: int) -> MambaDims:
    options = MambaOptions(state_size=o.mamba_d_state, expand=o.mamba_expand,
                           conv_kernel=o.mamba_d_conv, time_step_rank=o.mamba_dt_rank)
    return mamba_dims(options, hidden, MAMBA_KEYS)


def jamba_moe(config: ArchitectureConfig, layer: int) -> SparseMoE:
    """SparseMoE with unnormalized top-k weights whose router reads ``feed_forward.router``
    (its sizes checked by ``normalize``)."""
    o, hidden, experts = config.options, config.hidden_size, config.options.num_local_experts
    moe = SparseMoE(hidden, config.intermediate_size, experts, o.num_experts_per_tok,
                    normalize_top_k=False, activation=config.hidden_act)
    moe.gate.weight = Weight([hidden, experts], checkpoint_shape=[experts, hidden],
                             checkpoint_name=f"model.layers.{layer}.feed_forward.router.weight",
                             transform=transpose)
    return moe


class JambaDecoderLayer(nn.Module):
    """x + mixer(input_layernorm(x)), then x + feed_forward(pre_ff_layernorm(x))."""

    def __init__(self, config: ArchitectureConfig, layer: int):
        super().__init__()
        o, eps = config.options, config.rms_norm_eps
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, eps)
        self.self_attn = self.mamba = None
        if _periodic(o, "attn", layer):
            self.self_attn = llama_attention(config, rotary_dim=0)
        else:
            self.mamba = MambaMixer(
                _mamba_dims(o, config.hidden_size), proj_bias=o.mamba_proj_bias,
                conv_bias=o.mamba_conv_bias, activation=config.hidden_act, inner_norm_eps=eps)
        self.feed_forward = (
            jamba_moe(config, layer) if o.num_local_experts > 1 and _periodic(o, "expert", layer)
            else GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act))

    def forward(self, op, hidden, cos, sin, mask, *past):
        normed = self.input_layernorm(op, hidden)
        if self.mamba is not None:
            out, *present = self.mamba(op, normed, mask, *past)
        else:
            out, *present = self.self_attn(op, normed, cos, sin, mask, *past)
        hidden = op.Add(hidden, out)
        out = self.feed_forward(op, self.pre_ff_layernorm(op, hidden))
        return (op.Add(hidden, out), *present)


class JambaForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o, n = config.options, config.num_hidden_layers
        recurrent = [i for i in range(n) if not _periodic(o, "attn", i)]
        model = HybridCausalTransformer(
            config, [JambaDecoderLayer(config, i) for i in range(n)],
            RMSNorm(config.hidden_size, config.rms_norm_eps), recurrent,
            layer_rope_kinds=[None] * n, norm_attribute="final_layernorm")
        super().__init__(config, model)
        dims = _mamba_dims(o, config.hidden_size)
        self.recurrent_states = {i: dims.state_dims() for i in recurrent}


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Checks the layer pattern and the Mamba dims before anything is built."""
    o = read_options(JambaOptions, raw)
    _checked(o)
    _mamba_dims(o, positive_int("hidden_size", raw.get("hidden_size")))
    return dict(raw)


FAMILY = ModelFamily(
    name="jamba", model_types=("jamba",), architectures=("JambaForCausalLM",),
    module=JambaForCausalLM, tiny_preset="tiny-jamba", options=JambaOptions,
    normalize_raw=normalize, cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # 5 layers: attention at 1 and 4 (period 3, offset 1), Mamba at 0, 2, 3; 4 experts of
    # which 2 per token at 0, 2, 4 (period 2, offset 0), a dense MLP at 1 and 3; so each
    # mixer meets each feed-forward. Mamba: intermediate 128, state 12, conv 4, rank 5
    "tiny-jamba": {
        "model_type": "jamba", "architectures": ["JambaForCausalLM"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
        "attn_layer_period": 3, "attn_layer_offset": 1, "expert_layer_period": 2,
        "expert_layer_offset": 0, "num_experts": 4, "num_experts_per_tok": 2,
        "mamba_d_state": 12, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 5,
        "mamba_conv_bias": True, "mamba_proj_bias": False, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    },
}
