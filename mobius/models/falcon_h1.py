"""Falcon-H1 (``model_type: falcon_h1``): attention and a Mamba2 mixer side by side in every layer.

Each layer: ``x + ssm_out * mamba(ssm_in * n) + attn_out * attention(attn_in * n)``
with ``n = input_layernorm(x)``, then ``x + feed_forward(pre_ff_layernorm(x))``.
The mup multipliers (scalars and per-section lists, all transformers' defaults
1.0) are constants of the graph: ``ssm_multipliers`` scale in_proj's z / x / B / C
/ dt sections, ``mlp_multipliers`` the gate before its activation and the MLP
output, ``key_multiplier`` the keys (folded into the attention scale),
``embedding_multiplier`` the embeddings and ``lm_head_multiplier`` the logits. The
Mamba mixer ends with a gated RMSNorm (``mamba_rms_norm``; before or after the gate,
``mamba_norm_before_gate``) or with a bare SiLU gate. Every layer carries its KV
cache and the Mamba2 ``conv_state`` / ``recurrent_state``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM, scalar
from mobius.components.hybrid_transformer import HybridCausalTransformer
from mobius.components.mamba2 import Mamba2Dims, Mamba2Mixer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.models.mamba2 import checked_dims, time_step_limit
from mobius.tasks.causal_lm import KV_STATES
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class FalconH1Options:
    mamba_d_ssm: int | None = None  # normalize() applies transformers' 1024 / expand x hidden
    mamba_n_heads: int = 128
    mamba_d_head: int | str = "auto"
    mamba_n_groups: int = 1
    mamba_d_state: int = 256
    mamba_d_conv: int = 4
    mamba_expand: int = 2
    mamba_chunk_size: int = 256
    mamba_conv_bias: bool = True
    mamba_proj_bias: bool = False
    mamba_norm_before_gate: bool = True
    mamba_rms_norm: bool = False
    time_step_limit: tuple[float | str | dict, ...] | None = None
    projectors_bias: bool = False
    lm_head_multiplier: float = 1.0
    embedding_multiplier: float = 1.0
    mlp_multipliers: tuple[float, ...] = (1.0, 1.0)
    key_multiplier: float = 1.0
    attention_out_multiplier: float = 1.0
    attention_in_multiplier: float = 1.0
    ssm_multipliers: tuple[float, ...] = (1.0,) * 5
    ssm_in_multiplier: float = 1.0
    ssm_out_multiplier: float = 1.0


def _scaled(op, x, multiplier: float):
    return x if multiplier == 1.0 else op.Mul(x, scalar(op, multiplier))


class FalconH1DecoderLayer(nn.Module):
    def __init__(self, config: ArchitectureConfig, dims: Mamba2Dims):
        super().__init__()
        o, eps = config.options, config.rms_norm_eps
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, eps)
        self.mamba = Mamba2Mixer(
            dims, proj_bias=o.mamba_proj_bias, conv_bias=o.mamba_conv_bias, eps=eps,
            activation=config.hidden_act, time_step_limit=time_step_limit(o.time_step_limit),
            out_bias=o.projectors_bias, in_multipliers=o.ssm_multipliers,
            norm=(("norm_first" if o.mamba_norm_before_gate else "gate_first")
                  if o.mamba_rms_norm else None))
        self.self_attn = llama_attention(
            config, scale=config.head_dim ** -0.5 * o.key_multiplier)
        self.feed_forward = GatedMLP(config.hidden_size, config.intermediate_size,
                                     config.hidden_act, config.mlp_bias, o.mlp_multipliers)
        self.o = o

    def forward(self, op, hidden, cos, sin, masks, key, value, conv, state):
        o, (causal, padding) = self.o, masks
        normed = self.input_layernorm(op, hidden)
        ssm, conv, state = self.mamba(op, _scaled(op, normed, o.ssm_in_multiplier), padding,
                                      conv, state)
        attn, key, value = self.self_attn(op, _scaled(op, normed, o.attention_in_multiplier),
                                          cos, sin, causal, key, value)
        mixed = op.Add(_scaled(op, ssm, o.ssm_out_multiplier),
                       _scaled(op, attn, o.attention_out_multiplier))
        hidden = op.Add(hidden, mixed)
        hidden = op.Add(hidden, self.feed_forward(op, self.pre_ff_layernorm(op, hidden)))
        return hidden, key, value, conv, state


class FalconH1ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = config.options
        dims = falcon_h1_dims(o, config.hidden_size)
        n = config.num_hidden_layers
        model = HybridCausalTransformer(
            config, [FalconH1DecoderLayer(config, dims) for _ in range(n)],
            RMSNorm(config.hidden_size, config.rms_norm_eps), range(n), parallel=range(n),
            norm_attribute="final_layernorm", embed_scale=o.embedding_multiplier)
        super().__init__(config, model, logits_divisor=1.0 / o.lm_head_multiplier)
        self.recurrent_states = {i: KV_STATES + dims.state_dims() for i in range(n)}


NAMES = {"heads": "mamba_n_heads", "head_dim": "mamba_d_head", "groups": "mamba_n_groups",
         "conv": "mamba_d_conv", "state": "mamba_d_state", "chunk": "mamba_chunk_size"}


def falcon_h1_dims(o: FalconH1Options, hidden: int) -> Mamba2Dims:
    """The mixer's dims; mamba_d_ssm (set by normalize) is heads x head_dim."""
    heads = positive_int("mamba_n_heads", o.mamba_n_heads)
    inner = positive_int("mamba_d_ssm", o.mamba_d_ssm)
    if isinstance(o.mamba_d_head, str) and o.mamba_d_head != "auto":
        raise ConfigError(f"config.json: mamba_d_head must be an integer or 'auto', "
                          f"got {o.mamba_d_head!r}")
    head_dim = inner // heads if o.mamba_d_head == "auto" else o.mamba_d_head
    if heads * head_dim != inner:
        raise ConfigError(f"config.json: mamba_n_heads ({heads}) x mamba_d_head ({head_dim}) "
                          f"must be the Mamba width mamba_d_ssm ({inner})")
    return checked_dims(hidden, heads, head_dim, None, o.mamba_n_groups, o.mamba_d_state,
                        o.mamba_d_conv, o.mamba_chunk_size, NAMES)


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' mamba_d_ssm: 1024 when absent, mamba_expand x hidden_size when null;
    every switch checked before any weight is read."""
    out = dict(raw)
    hidden = positive_int("hidden_size", raw.get("hidden_size"))
    if "mamba_d_ssm" not in raw:
        out["mamba_d_ssm"] = 1024
    elif raw["mamba_d_ssm"] is None:
        out["mamba_d_ssm"] = positive_int("mamba_expand", raw.get("mamba_expand", 2)) * hidden
    o = read_options(FalconH1Options, out)
    falcon_h1_dims(o, hidden)
    time_step_limit(o.time_step_limit)
    for key, count in (("mlp_multipliers", 2), ("ssm_multipliers", 5)):
        if len(getattr(o, key)) != count:
            raise ConfigError(f"config.json: {key} must list {count} numbers, "
                              f"got {list(getattr(o, key))!r}")
    for field in dataclasses.fields(o):
        value = getattr(o, field.name)
        if field.name.endswith(("multiplier", "multipliers")) and not all(
                math.isfinite(v) and v != 0.0 for v in (
                    value if isinstance(value, tuple) else (value,))):
            raise ConfigError(f"config.json: {field.name} must be finite and nonzero, "
                              f"got {value!r}")
    return out


FAMILY = ModelFamily(
    name="falcon_h1", model_types=("falcon_h1",), architectures=("FalconH1ForCausalLM",),
    module=FalconH1ForCausalLM, tiny_preset="tiny-falcon_h1", options=FalconH1Options,
    normalize_raw=normalize, cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # 3 layers, each attention (4 heads of 16, 2 KV heads, RoPE) beside a Mamba2 mixer of
    # 8 heads of 16 in 2 groups (state 12, conv 4, chunks of 4, no gated norm); every mup
    # multiplier set (as Falcon-H1's checkpoints ship them)
    "tiny-falcon_h1": {
        **COMMON, "model_type": "falcon_h1", "architectures": ["FalconH1ForCausalLM"],
        "num_hidden_layers": 3, "head_dim": 16, "mamba_d_ssm": 128, "mamba_n_heads": 8,
        "mamba_d_head": 16, "mamba_n_groups": 2, "mamba_d_state": 12, "mamba_d_conv": 4,
        "mamba_chunk_size": 4, "mamba_rms_norm": False, "embedding_multiplier": 3.5,
        "lm_head_multiplier": 0.4, "mlp_multipliers": [0.7, 1.6], "key_multiplier": 0.6,
        "attention_in_multiplier": 1.3, "attention_out_multiplier": 0.8,
        "ssm_multipliers": [0.5, 1.4, 0.6, 1.5, 0.45], "ssm_in_multiplier": 1.25,
        "ssm_out_multiplier": 0.35,
    },
}
