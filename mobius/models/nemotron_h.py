"""Nemotron-H (``model_type: nemotron_h``): Mamba2, attention and MLP layers, one mixer each.

Every layer is ``x + mixer(norm(x))``; ``layers_block_type`` (legacy
``hybrid_override_pattern``: M, *, -) picks the mixer: a Mamba2 mixer
(mobius/components/mamba2.py, dt clamped below at ``time_step_min`` in
multi-token forwards, as transformers does), NoPE attention without biases, or a
non-gated MLP (``mlp_hidden_act``, squared ReLU by default). Mamba layers carry
``conv_state`` / ``recurrent_state``, attention layers a KV cache, MLP layers
nothing. transformers never ties ``lm_head`` and ignores ``attention_bias`` and
``sliding_window``; so does this module. Routed-expert layers ("moe", E) are not
built yet, and are refused up front.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM
from mobius.components.hybrid_transformer import HybridCausalTransformer
from mobius.components.mamba2 import Mamba2Dims, Mamba2Mixer
from mobius.components.mlp import MLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.models.mamba2 import checked_dims
from mobius.tiny.bases import VOCAB_SIZE
from mobius.weights.attach import IgnoredTensors

MAMBA, ATTENTION, MLP_LAYER, MOE = "linear_attention", "full_attention", "mlp", "moe"
PATTERN = {"M": MAMBA, "*": ATTENTION, "-": MLP_LAYER, "E": MOE}
#: config.json spellings before transformers 5 -> today's
LEGACY_KEYS = {"mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel",
               "mamba_expand": "expand", "mamba_dt_min": "time_step_min",
               "mamba_conv_bias": "use_conv_bias", "mamba_chunk_size": "chunk_size"}


@dataclasses.dataclass(frozen=True)
class NemotronHOptions:
    layers_block_type: tuple[str, ...] | None = None
    ssm_state_size: int = 128
    mamba_num_heads: int = 128
    mamba_head_dim: int = 64
    mamba_hidden_act: str = "silu"
    n_groups: int = 8
    conv_kernel: int = 4
    chunk_size: int = 128
    time_step_min: float = 0.001
    use_conv_bias: bool = True
    use_bias: bool = False
    mlp_hidden_act: str = "relu2"
    mlp_bias: bool = False
    layer_norm_epsilon: float = 1e-5


class NemotronHBlock(nn.Module):
    """x + mixer(norm(x)), the mixer one of Mamba2 / attention / MLP."""

    def __init__(self, config: ArchitectureConfig, kind: str, dims: Mamba2Dims | None):
        super().__init__()
        o = config.options
        self.kind = kind
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if kind == MAMBA:
            self.mixer = Mamba2Mixer(dims, proj_bias=o.use_bias, conv_bias=o.use_conv_bias,
                                     eps=config.rms_norm_eps, activation=o.mamba_hidden_act,
                                     time_step_limit=(o.time_step_min, float("inf")))
        elif kind == ATTENTION:
            self.mixer = llama_attention(config, rotary_dim=0)
        else:
            self.mixer = MLP(config.hidden_size, config.intermediate_size, o.mlp_hidden_act,
                             o.mlp_bias, names=("up_proj", "down_proj"))

    def forward(self, op, hidden, cos, sin, mask, *past):
        normed = self.norm(op, hidden)
        if self.kind == MAMBA:
            out, *present = self.mixer(op, normed, mask, *past)
        elif self.kind == ATTENTION:
            out, *present = self.mixer(op, normed, cos, sin, mask, *past)
        else:
            out, present = self.mixer(op, normed), []
        return (op.Add(hidden, out), *present)


class NemotronHForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = config.options
        kinds = layer_kinds(o)
        dims = nemotron_h_dims(o, config.hidden_size)
        layers = [NemotronHBlock(config, kind, dims) for kind in kinds]
        stateless = [i for i, kind in enumerate(kinds) if kind != ATTENTION]
        model = HybridCausalTransformer(
            config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps), stateless,
            layer_rope_kinds=[None] * len(kinds), embedding_attribute="embeddings",
            norm_attribute="norm_f")
        super().__init__(config, model, body_attribute="backbone")  # as transformers saves it
        self.recurrent_states = {i: dims.state_dims() if kinds[i] == MAMBA else ()
                                 for i in stateless}


def layer_kinds(o: NemotronHOptions) -> tuple[str, ...]:
    """Each layer's mixer (MAMBA, ATTENTION or MLP_LAYER); routed experts are refused."""
    kinds = o.layers_block_type
    bad = sorted({repr(k) for k in kinds if k not in PATTERN.values()})
    if bad:
        raise ConfigError(f"config.json: layers_block_type {', '.join(bad)} unknown; use "
                          f"{', '.join(repr(v) for v in PATTERN.values())}")
    if MOE in kinds:
        raise ConfigError("config.json: nemotron_h: routed-expert layers ('moe', pattern E) "
                          "are not supported yet")
    return kinds


def nemotron_h_dims(o: NemotronHOptions, hidden: int) -> Mamba2Dims:
    names = {"heads": "mamba_num_heads", "head_dim": "mamba_head_dim", "groups": "n_groups",
             "conv": "conv_kernel", "state": "ssm_state_size", "chunk": "chunk_size"}
    return checked_dims(hidden, o.mamba_num_heads, o.mamba_head_dim, None, o.n_groups,
                        o.ssm_state_size, o.conv_kernel, o.chunk_size, names)


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Legacy spellings (hybrid_override_pattern, mamba_*) to today's; the layer count
    from the layer list, as transformers derives it; every switch checked."""
    out = dict(raw)
    for old, new in LEGACY_KEYS.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    pattern = out.pop("hybrid_override_pattern", None)
    if out.get("layers_block_type") is None:
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(PATTERN):
            raise ConfigError(f"config.json: nemotron_h needs layers_block_type or a "
                              f"hybrid_override_pattern of {''.join(PATTERN)}, got {pattern!r}")
        out["layers_block_type"] = [PATTERN[c] for c in pattern]
    o = read_options(NemotronHOptions, out)
    layer_kinds(o)
    if not o.time_step_min >= 0.0:
        raise ConfigError(f"config.json: time_step_min must be >= 0, got {o.time_step_min}")
    nemotron_h_dims(o, out.get("hidden_size"))
    out.update(num_hidden_layers=len(o.layers_block_type), rms_norm_eps=o.layer_norm_epsilon)
    out.pop("layer_types", None)  # Nemotron-H's layer kinds are not sliding-window kinds
    return out


FAMILY = ModelFamily(
    name="nemotron_h", model_types=("nemotron_h",), architectures=("NemotronHForCausalLM",),
    module=NemotronHForCausalLM, tiny_preset="tiny-nemotron_h", options=NemotronHOptions,
    normalize_raw=normalize, cohorts=("genai", "every-dtype"),
    # transformers: no attention biases, lm_head never tied, no sliding window
    config_overrides=lambda raw: {"qkv_bias": False, "o_bias": False,
                                  "tie_word_embeddings": False, "sliding_window": None},
    # the routed experts' size (transformers writes it for dense checkpoints too; a "moe"
    # layer is refused, so no tensor need back it)
    unread_config=("moe_intermediate_size",),
    ignored_tensors=lambda config: (IgnoredTensors(
        r"mtp\..*", "multi-token-prediction layers, which transformers does not load"),),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Mamba2 / MLP / attention / MLP / Mamba2: 8 Mamba heads of 16 in 2 groups, state 12,
    # conv 4, chunks of 4; attention 4 heads of 16 (2 KV heads), NoPE; MLP 172 squared ReLU
    "tiny-nemotron_h": {
        "model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "intermediate_size": 172,
        "layers_block_type": [MAMBA, MLP_LAYER, ATTENTION, MLP_LAYER, MAMBA],
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2, "ssm_state_size": 12,
        "conv_kernel": 4, "chunk_size": 4, "layer_norm_epsilon": 1e-5,
        "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    },
}
