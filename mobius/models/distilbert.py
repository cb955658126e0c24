"""DistilBERT (feature extraction, role ``encoder``): BERT's post-norm encoder with
its own names (q_lin/k_lin/v_lin/out_lin, sa_layer_norm, ffn.lin1/lin2,
output_layer_norm), word + position embeddings only (no token types), and its
own config spellings (dim, n_layers, n_heads, hidden_dim, activation). Learned or
sinusoidal position tables are both stored in the checkpoint, so both read alike.
"""

from __future__ import annotations

from typing import Any, Mapping

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention_mask import padding_mask
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.models.bert import bidirectional_attention
from mobius.models.family import ModelFamily
from mobius.tasks import encoder
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import VOCAB_SIZE

_EPS = 1e-12  # transformers' DistilBERT hard-codes its LayerNorm epsilon


def normalize_distilbert(raw: Mapping[str, Any]) -> dict[str, Any]:
    """DistilBERT's config.json spellings -> the standard keys."""
    out = dict(raw)
    for theirs, ours in (("dim", "hidden_size"), ("n_layers", "num_hidden_layers"),
                         ("n_heads", "num_attention_heads"), ("hidden_dim", "intermediate_size"),
                         ("activation", "hidden_act")):
        if theirs in raw:
            out[ours] = raw[theirs]
    out["num_key_value_heads"] = out.get("num_attention_heads")
    out["layer_norm_eps"] = _EPS
    return out


class DistilBertEmbeddings(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, _EPS)

    def forward(self, op, input_ids):
        ones = op.Add(op.Mul(input_ids, op.Constant(value_int=0)), op.Constant(value_int=1))
        positions = op.Sub(op.CumSum(ones, op.Constant(value_int=1)), op.Constant(value_int=1))
        hidden = op.Add(self.word_embeddings(op, input_ids), self.position_embeddings(op, positions))
        return self.LayerNorm(op, hidden)


class DistilBertAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.q_lin = Linear(hidden, hidden, True)
        self.k_lin = Linear(hidden, hidden, True)
        self.v_lin = Linear(hidden, hidden, True)
        self.out_lin = Linear(hidden, hidden, True)

    def forward(self, op, hidden, mask):
        attn = bidirectional_attention(op, (self.q_lin, self.k_lin, self.v_lin), hidden, mask,
                                       self.num_heads, self.head_dim)
        return self.out_lin(op, attn)


class DistilBertFFN(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.activation = config.hidden_act
        self.lin1 = Linear(config.hidden_size, config.intermediate_size, True)
        self.lin2 = Linear(config.intermediate_size, config.hidden_size, True)

    def forward(self, op, x):
        return self.lin2(op, apply_activation(op, self.lin1(op, x), self.activation))


class DistilBertLayer(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.attention = DistilBertAttention(config)
        self.sa_layer_norm = LayerNorm(config.hidden_size, _EPS)
        self.ffn = DistilBertFFN(config)
        self.output_layer_norm = LayerNorm(config.hidden_size, _EPS)

    def forward(self, op, hidden, mask):
        hidden = self.sa_layer_norm(op, op.Add(self.attention(op, hidden, mask), hidden))
        return self.output_layer_norm(op, op.Add(self.ffn(op, hidden), hidden))


class DistilBertTransformer(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.layer = nn.ModuleList([DistilBertLayer(config)
                                    for _ in range(config.num_hidden_layers)])

    def forward(self, op, hidden, mask):
        for layer in self.layer:
            hidden = layer(op, hidden, mask)
        return hidden


class DistilBertModel(nn.Module):
    """The encoder module protocol of mobius/tasks/encoder.py."""

    text_inputs = ("input_ids", "attention_mask")

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.embeddings = DistilBertEmbeddings(config)
        self.transformer = DistilBertTransformer(config)

    def forward(self, op, input_ids, attention_mask):
        mask = padding_mask(op, attention_mask, get_build_dtype())
        return self.transformer(op, self.embeddings(op, input_ids), mask)


FAMILY = ModelFamily(
    name="distilbert", model_types=("distilbert",),
    architectures=("DistilBertModel",),
    module=DistilBertModel, task=encoder.TASK, tiny_preset="tiny-distilbert",
    normalize_raw=normalize_distilbert,
    checkpoint_prefixes=("", "distilbert."),
    ignored_tensors=lambda config: (
        IgnoredTensors(r"vocab_(transform|layer_norm|projector)\..*",
                       "DistilBertForMaskedLM head: not part of feature extraction"),),
    config_overrides=lambda raw: {"rms_norm_eps": _EPS},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-distilbert": {
        "model_type": "distilbert", "architectures": ["DistilBertModel"], "vocab_size": VOCAB_SIZE,
        "dim": 64, "hidden_dim": 172, "n_layers": 2, "n_heads": 4,
        "max_position_embeddings": 256, "activation": "gelu", "pad_token_id": 0,
    },
}
