"""Mamba (``model_type: mamba``): a pure state-space LM, every layer a Mamba (v1) mixer.

Each layer is ``x + mixer(norm(x))`` (mobius/components/mamba.py), the body
``backbone.embeddings -> layers -> norm_f``, then ``lm_head`` (tied by default). No
layer has a KV cache: each carries ``conv_state`` [intermediate, conv_kernel - 1] and
``recurrent_state`` [intermediate, state_size], which onnxruntime-genai finds by name
(mobius/tasks/causal_lm.py). ``residual_in_fp32`` changes nothing in an f32 build;
f16 / bf16 builds keep the residual stream in the build dtype (the scan runs in float32).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM
from mobius.components.hybrid_transformer import HybridCausalTransformer
from mobius.components.mamba import MambaDims, MambaMixer
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.tiny.bases import VOCAB_SIZE


@dataclasses.dataclass(frozen=True)
class MambaOptions:
    state_size: int = 16
    expand: int = 2
    conv_kernel: int = 4
    use_bias: bool = False
    use_conv_bias: bool = True
    time_step_rank: int | str = "auto"  # "auto": ceil(hidden_size / 16)
    layer_norm_epsilon: float = 1e-5


def mamba_dims(o: MambaOptions, hidden: int, keys: Mapping[str, str] | None = None) -> MambaDims:
    """MambaDims after the checks transformers' shapes imply; ``keys``: the config.json
    spelling of a field where it differs from MambaOptions' (Jamba's mamba_d_conv ...)."""
    def key(name: str) -> str:
        return (keys or {}).get(name, name)

    for name in ("state_size", "expand", "conv_kernel"):
        positive_int(key(name), getattr(o, name))
    rank = o.time_step_rank
    if rank == "auto":
        rank = math.ceil(hidden / 16)
    elif isinstance(rank, str):
        raise ConfigError(f"config.json: {key('time_step_rank')!r} must be an integer or "
                          f"\"auto\", got {rank!r}")
    if o.conv_kernel < 2:
        raise ConfigError(f"config.json: {key('conv_kernel')} ({o.conv_kernel}) must be at "
                          f"least 2 (a carried convolution state of {key('conv_kernel')} - 1 "
                          f"positions)")
    return MambaDims(hidden, o.expand * hidden, o.state_size, o.conv_kernel,
                     positive_int(key("time_step_rank"), rank))


class MambaBlock(nn.Module):
    """x + mixer(norm(x))."""

    def __init__(self, config: ArchitectureConfig, dims: MambaDims):
        super().__init__()
        o = config.options
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mixer = MambaMixer(dims, proj_bias=o.use_bias, conv_bias=o.use_conv_bias,
                                activation=config.hidden_act)

    def forward(self, op, hidden, cos, sin, mask, past_conv, past_state):
        out, conv, state = self.mixer(op, self.norm(op, hidden), mask, past_conv, past_state)
        return op.Add(hidden, out), conv, state


class MambaForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        dims = mamba_dims(config.options, config.hidden_size)
        n = config.num_hidden_layers
        model = HybridCausalTransformer(
            config, [MambaBlock(config, dims) for _ in range(n)],
            RMSNorm(config.hidden_size, config.rms_norm_eps), range(n),
            layer_rope_kinds=[None] * n, embedding_attribute="embeddings",
            norm_attribute="norm_f")
        super().__init__(config, model, body_attribute="backbone")
        self.recurrent_states = {i: dims.state_dims() for i in range(n)}


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Mamba's spellings of the fields every decoder has: no layer attends (one
    nominal head spanning the intermediate size), expand x hidden for the intermediate
    size; tied embeddings unless config.json says otherwise (transformers' default)."""
    out = dict(raw)
    o = read_options(MambaOptions, raw)
    hidden = positive_int("hidden_size", raw.get("hidden_size"))
    dims = mamba_dims(o, hidden)
    out.update(num_attention_heads=1, num_key_value_heads=1, head_dim=dims.intermediate,
               intermediate_size=dims.intermediate, rms_norm_eps=o.layer_norm_epsilon)
    out.setdefault("tie_word_embeddings", True)
    return out


FAMILY = ModelFamily(
    name="mamba", model_types=("mamba",), architectures=("MambaForCausalLM",),
    module=MambaForCausalLM, tiny_preset="tiny-mamba", options=MambaOptions,
    normalize_raw=normalize, cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # 3 Mamba layers: intermediate 128 (expand 2 x hidden 64), state 12, conv 4, time-step
    # rank 5; dt initialized in [0.05, 0.5] (init-only keys) so that the scan's decay matters
    "tiny-mamba": {
        "model_type": "mamba", "architectures": ["MambaForCausalLM"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "num_hidden_layers": 3, "state_size": 12,
        "expand": 2, "conv_kernel": 4, "time_step_rank": 5, "use_bias": False,
        "use_conv_bias": True, "layer_norm_epsilon": 1e-5, "hidden_act": "silu",
        "time_step_min": 0.05, "time_step_max": 0.5, "tie_word_embeddings": False,
        "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    },
}
