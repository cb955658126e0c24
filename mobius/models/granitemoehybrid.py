"""GraniteMoeHybrid (Granite 4.0-H): Mamba2 and attention layers, MoE + shared MLP.

``layer_types`` (legacy ``layers_block_type``) picks each layer's mixer: Mamba2
("linear_attention" / "mamba", mobius/components/mamba2.py) or attention
("full_attention" / "attention"), with RoPE only when ``position_embedding_type``
is "rope". Every layer's feed-forward is the shared SiLU-gated MLP
(``shared_intermediate_size``; ``shared_mlp.input_linear`` holds gate rows then up
rows), plus GraniteMoE's sparse MoE when ``num_local_experts`` > 0. Granite's
multipliers scale embeddings, both residual branches, the attention logits and
the final logits. Mamba layers carry ``conv_state`` and ``recurrent_state``
instead of a KV cache (mobius/tasks/causal_lm.py).
"""

from __future__ import annotations

import dataclasses
import math

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.causal_transformer import CausalLM, scalar
from mobius.components.hybrid_transformer import HybridCausalTransformer
from mobius.components.linear import Linear
from mobius.components.mamba2 import Mamba2Dims, Mamba2Mixer
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.granitemoe import GraniteMoeOptions, granitemoe_block
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON

MAMBA, ATTENTION = "linear_attention", "full_attention"
LEGACY_LAYER_TYPES = {"mamba": MAMBA, "attention": ATTENTION}


@dataclasses.dataclass(frozen=True)
class GraniteMoeHybridOptions(GraniteMoeOptions):
    shared_intermediate_size: int = 1024
    layer_types: tuple[str, ...] | None = None
    layers_block_type: tuple[str, ...] | None = None  # the spelling before transformers 5
    position_embedding_type: str | None = None
    mamba_n_heads: int = 128
    mamba_n_groups: int = 1
    mamba_expand: int = 2
    mamba_d_head: int | str = "auto"
    mamba_d_state: int = 256
    mamba_d_conv: int = 4
    mamba_chunk_size: int = 256
    mamba_proj_bias: bool = False
    mamba_conv_bias: bool = True
    time_step_limit: tuple[float | str | dict, ...] | None = None  # inf may be {"__float__": ..}


class SharedMLP(nn.Module):
    """output_linear(act(gate) * up), [gate; up] = input_linear(x)."""

    def __init__(self, hidden: int, inner: int, activation: str):
        super().__init__()
        self.inner, self.activation = inner, activation
        self.input_linear = Linear(hidden, 2 * inner)
        self.output_linear = Linear(inner, hidden)

    def forward(self, op, x):
        gate, up = op.Split(self.input_linear(op, x),
                            op.Constant(value_ints=[self.inner, self.inner]), axis=-1, _outputs=2)
        return self.output_linear(op, op.Mul(apply_activation(op, gate, self.activation), up))


class GraniteHybridDecoderLayer(nn.Module):
    """Pre-norm layer: x + s * mixer(norm(x)), then x + s * (moe(norm(x)) + shared_mlp(norm(x)))."""

    def __init__(self, config: ArchitectureConfig, layer: int, mamba: Mamba2Mixer | None):
        super().__init__()
        o, eps = config.options, config.rms_norm_eps
        self.input_layernorm = RMSNorm(config.hidden_size, eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps)
        self.mamba = mamba
        self.self_attn = None if mamba is not None else llama_attention(
            config, scale=_number("attention_multiplier", o.attention_multiplier),
            rotary_dim=config.rope.rotary_dim if _rope(o) else 0)
        self.block_sparse_moe = granitemoe_block(config, layer) if _experts(o) else None
        shared = _int("shared_intermediate_size", o.shared_intermediate_size)
        self.shared_mlp = SharedMLP(config.hidden_size, shared, config.hidden_act)
        self.residual_scale = _number("residual_multiplier", o.residual_multiplier)

    def _scaled(self, op, x):
        return x if self.residual_scale == 1.0 else op.Mul(x, scalar(op, self.residual_scale))

    def forward(self, op, hidden, cos, sin, mask, *past):
        normed = self.input_layernorm(op, hidden)
        if self.mamba is not None:
            out, *present = self.mamba(op, normed, mask, *past)
        else:
            out, *present = self.self_attn(op, normed, cos, sin, mask, *past)
        hidden = op.Add(hidden, self._scaled(op, out))
        normed = self.post_attention_layernorm(op, hidden)
        ff = self.shared_mlp(op, normed)
        if self.block_sparse_moe is not None:
            ff = op.Add(self.block_sparse_moe(op, normed), ff)
        return (op.Add(hidden, self._scaled(op, ff)), *present)


class GraniteMoeHybridForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = config.options
        kinds = layer_kinds(o, config.num_hidden_layers)
        dims = mamba_dims(o, config.hidden_size) if MAMBA in kinds else None
        layers = [GraniteHybridDecoderLayer(config, i, Mamba2Mixer(
            dims, proj_bias=o.mamba_proj_bias, conv_bias=o.mamba_conv_bias,
            eps=config.rms_norm_eps, activation=config.hidden_act) if kind == MAMBA else None)
            for i, kind in enumerate(kinds)]
        rope = _rope(o)
        recurrent = [i for i, kind in enumerate(kinds) if kind == MAMBA]
        model = HybridCausalTransformer(
            config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps), recurrent,
            layer_rope_kinds=["default" if rope and k == ATTENTION else None for k in kinds],
            embed_scale=_number("embedding_multiplier", o.embedding_multiplier))
        super().__init__(config, model,
                         logits_divisor=_number("logits_scaling", o.logits_scaling))
        self.recurrent_states = {i: dims.state_dims() for i in recurrent}


def layer_kinds(o: GraniteMoeHybridOptions, layers: int) -> list[str]:
    """Each layer's mixer, MAMBA or ATTENTION (transformers' default: all Mamba)."""
    kinds = o.layer_types or o.layers_block_type
    if kinds is None:
        return [MAMBA] * layers
    if len(kinds) != layers:
        raise ConfigError(f"config.json: layer_types must list {layers} layer types, "
                          f"got {list(kinds)!r}")
    kinds = [LEGACY_LAYER_TYPES.get(k, k) for k in kinds]
    bad = sorted({repr(k) for k in kinds if k not in (MAMBA, ATTENTION)})
    if bad:
        raise ConfigError(f"config.json: layer_types {', '.join(bad)} not supported; use "
                          f"{MAMBA!r} (or 'mamba') and {ATTENTION!r} (or 'attention')")
    return kinds


def mamba_dims(o: GraniteMoeHybridOptions, hidden: int) -> Mamba2Dims:
    heads = _int("mamba_n_heads", o.mamba_n_heads)
    groups = _int("mamba_n_groups", o.mamba_n_groups)
    inner = _int("mamba_expand", o.mamba_expand) * hidden
    head_dim = (inner // heads if o.mamba_d_head == "auto"
                else _int("mamba_d_head", o.mamba_d_head))
    if heads * head_dim != inner or heads % groups:
        raise ConfigError(f"config.json: mamba_n_heads ({heads}) x mamba_d_head ({head_dim}) must "
                          f"be mamba_expand x hidden_size ({inner}), in groups of mamba_n_groups "
                          f"({groups})")
    limit = o.time_step_limit
    if limit is not None and [_json_float(v) for v in limit] != [0.0, math.inf]:
        raise ConfigError(f"config.json: time_step_limit {list(limit)!r} is not supported "
                          f"(transformers clamps dt in multi-token forwards only); only [0.0, inf]")
    conv = _int("mamba_d_conv", o.mamba_d_conv)
    if conv < 2:
        raise ConfigError(f"config.json: mamba_d_conv ({conv}) must be at least 2 (a carried "
                          f"convolution state of mamba_d_conv - 1 positions)")
    return Mamba2Dims(hidden, heads, head_dim, groups, _int("mamba_d_state", o.mamba_d_state),
                      conv, _int("mamba_chunk_size", o.mamba_chunk_size))


def _json_float(value):
    """transformers writes inf as {"__float__": "Infinity"}."""
    if isinstance(value, dict) and set(value) == {"__float__"}:
        value = value["__float__"]
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def _rope(o: GraniteMoeHybridOptions) -> bool:
    kind = o.position_embedding_type
    if kind not in (None, "rope", "nope"):
        raise ConfigError(f"config.json: position_embedding_type {kind!r} is not supported; "
                          f"use 'rope' or none")
    return kind == "rope"


def checked(raw) -> dict:
    """config_overrides: every GraniteMoeHybrid switch checked before any weight is read."""
    o = read_options(GraniteMoeHybridOptions, raw)
    kinds = layer_kinds(o, _int("num_hidden_layers", raw.get("num_hidden_layers", 0)))
    if MAMBA in kinds:
        mamba_dims(o, _int("hidden_size", raw.get("hidden_size", 0)))
    _rope(o)
    _experts(o)
    for key in ("embedding_multiplier", "residual_multiplier", "attention_multiplier",
                "logits_scaling"):
        _number(key, getattr(o, key))
    return {}


def _experts(o: GraniteMoeHybridOptions) -> int:
    value = o.num_local_experts
    if value < 0:
        raise ConfigError(f"config.json: 'num_local_experts' must be a non-negative integer, "
                          f"got {value!r}")
    return value


def _int(key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"config.json: {key!r} must be a positive integer, got {value!r}")
    return value


def _number(key: str, value: float) -> float:
    if not math.isfinite(value):
        raise ConfigError(f"config.json: {key!r} must be a finite number, got {value!r}")
    return value


FAMILY = ModelFamily(
    name="granitemoehybrid", model_types=("granitemoehybrid",),
    architectures=("GraniteMoeHybridForCausalLM",),
    module=GraniteMoeHybridForCausalLM, tiny_preset="tiny-granitemoehybrid",
    cohorts=("genai",), options=GraniteMoeHybridOptions,
    config_overrides=checked,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Mamba2 + attention hybrid: 8 Mamba heads of 16 in 2 groups, state 12, conv 4;
    # NoPE attention (Granite 4.0-H), 4 experts of 36 + a shared MLP of 52.
    "tiny-granitemoehybrid": {
        **COMMON, "model_type": "granitemoehybrid",
        "architectures": ["GraniteMoeHybridForCausalLM"], "num_hidden_layers": 3,
        "layer_types": ["linear_attention", "full_attention", "linear_attention"],
        "intermediate_size": 36, "shared_intermediate_size": 52, "num_local_experts": 4,
        "num_experts_per_tok": 2, "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_n_groups": 2,
        "mamba_d_state": 12, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
        "mamba_conv_bias": True, "mamba_proj_bias": False, "position_embedding_type": "nope",
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
        "attention_multiplier": 0.0078125, "logits_scaling": 8.0,
    },
}
