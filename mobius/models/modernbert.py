"""ModernBERT (feature extraction, role ``encoder``): pre-norm layers (layer 0 has no
attention norm), fused ``Wqkv`` and GeGLU ``Wi`` (chunked into input and gate),
RoPE with a global and a local base, and attention that alternates: every
``global_attn_every_n_layers``-th layer (``layer_types`` in transformers 5 configs)
sees the whole sequence, the others only keys within ``local_attention // 2``
positions either side. A final norm closes the body. Biases are off by default;
``attention_bias`` / ``mlp_bias`` / ``norm_bias`` switch them on. Module names
mirror transformers' ModernBertModel; its *For* heads keep the body under ``model.``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention import scaled_dot_product_attention
from mobius.components.attention_mask import padding_mask
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.rotary import RotaryEmbedding, apply_rotary
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import boolean, finite_float, positive_int
from mobius.config.rope import RopeConfig, RopeKeys
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.tasks import encoder
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import VOCAB_SIZE

FULL, SLIDING = "full_attention", "sliding_attention"
#: transformers' defaults: (global, local) RoPE base
THETAS = {FULL: 160_000.0, SLIDING: 10_000.0}


@dataclasses.dataclass(frozen=True)
class ModernBertOptions(RopeKeys):
    """The config.json switches ModernBERT reads beyond ArchitectureConfig's."""

    norm_bias: bool = False
    local_attention: int = 128
    classifier_pooling: str = "cls"
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    decoder_bias: bool = True
    global_rope_theta: float = THETAS[FULL]  # hub configs' bases; transformers 5 nests
    local_rope_theta: float = THETAS[SLIDING]  # them in rope_parameters by layer type

    def __post_init__(self):
        if self.classifier_pooling not in ("cls", "mean"):
            raise ConfigError(f"config.json: 'classifier_pooling' must be 'cls' or 'mean', "
                              f"got {self.classifier_pooling!r}")
        positive_int("local_attention", self.local_attention)
        for key in ("global_rope_theta", "local_rope_theta"):
            finite_float(key, getattr(self, key), positive=True)

    @property
    def local_window(self) -> int:
        """local_attention // 2: keys at most this far, either side."""
        return self.local_attention // 2


def settings(config: ArchitectureConfig) -> ModernBertOptions:
    return config.options


def layer_types(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """``layer_types`` when given, else every n-th layer (from 0) global (hub configs)."""
    given = raw.get("layer_types")
    if given:
        unknown = sorted(set(given) - {FULL, SLIDING})
        if unknown:
            raise ConfigError(f"config.json: layer_types {unknown} are not ModernBERT's "
                              f"({FULL}, {SLIDING})")
        return tuple(given)
    every = positive_int("global_attn_every_n_layers", raw.get("global_attn_every_n_layers", 3))
    layers = positive_int("num_hidden_layers", raw.get("num_hidden_layers"))
    return tuple(SLIDING if i % every else FULL for i in range(layers))


def ropes(config: ArchitectureConfig) -> dict[str, RopeConfig]:
    """RoPE per layer type: transformers 5 nests rope_parameters by layer type; hub
    configs spell the bases global_rope_theta / local_rope_theta."""
    options = config.options
    params = options.rope_parameters or {}
    out = {}
    for kind in sorted(set(config.layer_types)):
        if kind in params:
            kind_params = params[kind]
        else:
            theta = options.global_rope_theta if kind == FULL else options.local_rope_theta
            kind_params = {"rope_type": "default", "rope_theta": theta}
        out[kind] = RopeConfig.from_hf(
            options.rope_raw(config.max_position_embeddings, rope_parameters=kind_params),
            config.head_dim)
    return out


class ModernBertEmbeddings(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.tok_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.norm = LayerNorm(config.hidden_size, config.rms_norm_eps, settings(config).norm_bias)

    def forward(self, op, input_ids):
        return self.norm(op, self.tok_embeddings(op, input_ids))


class ModernBertAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.Wqkv = Linear(hidden, 3 * hidden, config.qkv_bias)
        self.Wo = Linear(hidden, hidden, config.o_bias)

    def forward(self, op, hidden, cos, sin, mask):
        def heads(x):
            x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
            return op.Transpose(x, perm=[0, 2, 1, 3])

        q, k, v = op.Split(self.Wqkv(op, hidden), axis=-1, num_outputs=3, _outputs=3)
        q, k, v = heads(q), heads(k), heads(v)
        q = apply_rotary(op, q, cos, sin, self.head_dim, self.head_dim)
        k = apply_rotary(op, k, cos, sin, self.head_dim, self.head_dim)
        attn, _, _ = scaled_dot_product_attention(op, q, k, v, mask, scale=self.head_dim**-0.5)
        attn = op.Reshape(op.Transpose(attn, perm=[0, 2, 1, 3]),
                          op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        return self.Wo(op, attn)


class ModernBertMLP(nn.Module):
    """Wo(act(input) * gate), input and gate the two halves of Wi(x)."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.activation = config.hidden_act
        self.Wi = Linear(config.hidden_size, 2 * config.intermediate_size, config.mlp_bias)
        self.Wo = Linear(config.intermediate_size, config.hidden_size, config.mlp_bias)

    def forward(self, op, x):
        value, gate = op.Split(self.Wi(op, x), axis=-1, num_outputs=2, _outputs=2)
        return self.Wo(op, op.Mul(apply_activation(op, value, self.activation), gate))


class ModernBertEncoderLayer(nn.Module):
    def __init__(self, config: ArchitectureConfig, index: int):
        super().__init__()
        eps, bias = config.rms_norm_eps, settings(config).norm_bias
        self.attention_type = config.layer_types[index]
        self.attn_norm = LayerNorm(config.hidden_size, eps, bias) if index else None
        self.attn = ModernBertAttention(config)
        self.mlp_norm = LayerNorm(config.hidden_size, eps, bias)
        self.mlp = ModernBertMLP(config)

    def forward(self, op, hidden, cos, sin, mask):
        normed = hidden if self.attn_norm is None else self.attn_norm(op, hidden)
        hidden = op.Add(hidden, self.attn(op, normed, cos, sin, mask))
        return op.Add(hidden, self.mlp(op, self.mlp_norm(op, hidden)))


class ModernBertModel(nn.Module):
    """The encoder module protocol of mobius/tasks/encoder.py."""

    text_inputs = ("input_ids", "attention_mask")

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.local_window = settings(config).local_window
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList([ModernBertEncoderLayer(config, i)
                                     for i in range(config.num_hidden_layers)])
        self.final_norm = LayerNorm(config.hidden_size, config.rms_norm_eps,
                                    settings(config).norm_bias)
        self.rope_kinds = sorted(ropes(config))
        for kind, rope in ropes(config).items():
            setattr(self, f"rotary_emb_{kind}", RotaryEmbedding(rope))

    def forward(self, op, input_ids, attention_mask):
        one = op.Constant(value_int=1)
        ones = op.Add(op.Mul(input_ids, op.Constant(value_int=0)), one)
        positions = op.Sub(op.CumSum(ones, one), one)  # 0..seq-1: transformers' arange
        rotary = {kind: getattr(self, f"rotary_emb_{kind}")(op, positions)
                  for kind in self.rope_kinds}
        dtype = get_build_dtype()
        masks = {FULL: padding_mask(op, attention_mask, dtype) if FULL in rotary else None,
                 SLIDING: (padding_mask(op, attention_mask, dtype, self.local_window)
                           if SLIDING in rotary else None)}
        hidden = self.embeddings(op, input_ids)
        for layer in self.layers:
            cos, sin = rotary[layer.attention_type]
            hidden = layer(op, hidden, cos, sin, masks[layer.attention_type])
        return self.final_norm(op, hidden)


class ModernBertPredictionHead(nn.Module):
    """norm(act(dense(x))): what the fill-mask and classifier heads share."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        s = settings(config)
        self.activation = s.classifier_activation
        self.dense = Linear(config.hidden_size, config.hidden_size, s.classifier_bias)
        self.norm = LayerNorm(config.hidden_size, config.rms_norm_eps, s.norm_bias)

    def forward(self, op, x):
        return self.norm(op, apply_activation(op, self.dense(op, x), self.activation))


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    window = positive_int("local_attention", raw.get("local_attention", 128)) // 2
    return {"rms_norm_eps": finite_float("norm_eps", raw.get("norm_eps", 1e-5), positive=True),
            "hidden_act": raw.get("hidden_activation") or "gelu",
            "layer_types": layer_types(raw), "sliding_window": window or None,
            "tie_word_embeddings": boolean(raw, "tie_word_embeddings", True)}


FAMILY = ModelFamily(
    name="modernbert", cohorts=("every-dtype",), model_types=("modernbert",),
    architectures=("ModernBertModel",),
    module=ModernBertModel, task=encoder.TASK, tiny_preset="tiny-modernbert",
    checkpoint_prefixes=("", "model."),
    ignored_tensors=lambda config: (
        IgnoredTensors(r"(head|decoder|classifier)\..*",
                       "fill-mask / classifier heads: not part of feature extraction"),),
    config_overrides=_overrides, options=ModernBertOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # ModernBERT: 3 layers, global every 2nd (full, sliding, full; the default 3 would make
    # layer 2 local), local window 4 (2 either side) well inside the test sequence, distinct
    # global/local RoPE bases; GeGLU intermediate 88 (Wi: 176). Biases off, as released.
    "tiny-modernbert": {
        "model_type": "modernbert", "architectures": ["ModernBertModel"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "intermediate_size": 88,
        "num_hidden_layers": 3, "num_attention_heads": 4, "max_position_embeddings": 256,
        "global_attn_every_n_layers": 2, "local_attention": 4, "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0, "hidden_activation": "gelu", "norm_eps": 1e-5,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1,
        "sep_token_id": 2,
    },
}
