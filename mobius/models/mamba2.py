"""Mamba2 (``model_type: mamba2``): a pure state-space LM, every layer a Mamba2 mixer.

Each layer is ``x + mixer(norm(x))`` (mobius/components/mamba2.py), the body
``backbone.embeddings -> layers -> norm_f``, then ``lm_head``. No layer has a KV
cache: each carries ``conv_state`` and ``recurrent_state``, which
onnxruntime-genai finds by name (mobius/tasks/causal_lm.py).
``residual_in_fp32`` changes nothing in an f32 build; f16 / bf16 builds keep the
residual stream in the build dtype (the scan itself runs in float32).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM
from mobius.components.hybrid_transformer import HybridCausalTransformer
from mobius.components.mamba2 import Mamba2Dims, Mamba2Mixer
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.tiny.bases import VOCAB_SIZE



@dataclasses.dataclass(frozen=True)
class Mamba2Options:
    num_heads: int = 128
    head_dim: int = 64
    state_size: int = 128
    expand: int = 2
    conv_kernel: int = 4
    n_groups: int = 8
    use_bias: bool = False
    use_conv_bias: bool = True
    chunk_size: int = 256
    time_step_limit: tuple[float | str | dict, ...] | None = None  # default (0.0, inf)
    layer_norm_epsilon: float = 1e-5


def json_float(key: str, value: Any) -> float:
    """A config.json number; transformers writes inf as {"__float__": "Infinity"}."""
    if isinstance(value, dict) and set(value) == {"__float__"}:
        value = value["__float__"]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"config.json: {key!r} must hold numbers, got {value!r}") from None
    if math.isnan(number):
        raise ConfigError(f"config.json: {key!r} must hold numbers, got {value!r}")
    return number


def time_step_limit(values, default=(0.0, math.inf)) -> tuple[float, float]:
    """(lo, hi) with 0 <= lo < hi, transformers' dt clamp in multi-token forwards."""
    if values is None:
        return default
    limit = tuple(json_float("time_step_limit", v) for v in values)
    if len(limit) != 2 or not 0.0 <= limit[0] < limit[1]:
        raise ConfigError(f"config.json: time_step_limit must be [lo, hi] with 0 <= lo < hi, "
                          f"got {list(values)!r}")
    return limit


def checked_dims(hidden: int, heads: int, head_dim: int, expand: int | None, groups: int,
                 state: int, conv: int, chunk: int, names: dict[str, str]) -> Mamba2Dims:
    """Mamba2Dims after transformers' own consistency checks; ``names``: the config.json
    keys (they differ between families); expand None: no expand x hidden_size to match."""
    values = {"heads": heads, "head_dim": head_dim, "groups": groups, "conv": conv,
              "state": state, "chunk": chunk, **({} if expand is None else {"expand": expand})}
    for what, value in values.items():
        positive_int(names[what], value)
    if expand is not None and heads * head_dim != expand * hidden:
        raise ConfigError(f"config.json: {names['heads']} ({heads}) x {names['head_dim']} "
                          f"({head_dim}) must equal {names['expand']} ({expand}) x hidden_size "
                          f"({hidden})")
    if heads % groups:
        raise ConfigError(f"config.json: {names['heads']} ({heads}) must be a multiple of "
                          f"{names['groups']} ({groups})")
    if conv < 2:
        raise ConfigError(f"config.json: {names['conv']} ({conv}) must be at least 2 (a carried "
                          f"convolution state of {names['conv']} - 1 positions)")
    return Mamba2Dims(hidden, heads, head_dim, groups, state, conv, chunk)


NAMES = {"heads": "num_heads", "head_dim": "head_dim", "expand": "expand", "groups": "n_groups",
         "conv": "conv_kernel", "state": "state_size", "chunk": "chunk_size"}


def mamba2_dims(o: Mamba2Options, hidden: int) -> Mamba2Dims:
    return checked_dims(hidden, o.num_heads, o.head_dim, o.expand, o.n_groups, o.state_size,
                        o.conv_kernel, o.chunk_size, NAMES)


class Mamba2Block(nn.Module):
    """x + mixer(norm(x))."""

    def __init__(self, config: ArchitectureConfig, dims: Mamba2Dims):
        super().__init__()
        o = config.options
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mixer = Mamba2Mixer(dims, proj_bias=o.use_bias, conv_bias=o.use_conv_bias,
                                 eps=config.rms_norm_eps, activation=config.hidden_act,
                                 time_step_limit=time_step_limit(o.time_step_limit))

    def forward(self, op, hidden, cos, sin, mask, past_conv, past_state):
        out, conv, state = self.mixer(op, self.norm(op, hidden), mask, past_conv, past_state)
        return op.Add(hidden, out), conv, state


class Mamba2ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        dims = mamba2_dims(config.options, config.hidden_size)
        n = config.num_hidden_layers
        model = HybridCausalTransformer(
            config, [Mamba2Block(config, dims) for _ in range(n)],
            RMSNorm(config.hidden_size, config.rms_norm_eps), range(n),
            layer_rope_kinds=[None] * n, embedding_attribute="embeddings",
            norm_attribute="norm_f")
        super().__init__(config, model, body_attribute="backbone")
        self.recurrent_states = {i: dims.state_dims() for i in range(n)}


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Mamba2's spellings of the fields every decoder has: the SSM heads stand for the
    attention heads (no layer attends), expand x hidden for the intermediate size."""
    out = dict(raw)
    o = read_options(Mamba2Options, raw)
    hidden = positive_int("hidden_size", raw.get("hidden_size"))
    mamba2_dims(o, hidden)
    time_step_limit(o.time_step_limit)
    out.update(num_attention_heads=o.num_heads, num_key_value_heads=o.num_heads,
               head_dim=o.head_dim, intermediate_size=o.expand * hidden,
               rms_norm_eps=o.layer_norm_epsilon)
    return out


FAMILY = ModelFamily(
    name="mamba2", model_types=("mamba2",), architectures=("Mamba2ForCausalLM",),
    module=Mamba2ForCausalLM, tiny_preset="tiny-mamba2", options=Mamba2Options,
    normalize_raw=normalize, cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # 3 Mamba2 layers: 8 heads of 16 (expand 2 x hidden 64) in 2 groups, state 12, conv 4;
    # chunks of 4 positions (a 10-token prefill spans 3, the last zero-padded)
    "tiny-mamba2": {
        "model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "num_hidden_layers": 3, "num_heads": 8,
        "head_dim": 16, "expand": 2, "n_groups": 2, "state_size": 12, "conv_kernel": 4,
        "chunk_size": 4, "use_bias": False, "use_conv_bias": True, "layer_norm_epsilon": 1e-5,
        "hidden_act": "silu", "tie_word_embeddings": False,
        "max_position_embeddings": 256, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    },
}
