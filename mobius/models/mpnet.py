"""MPNet (feature extraction, role ``encoder``): BERT's post-norm encoder with
RoBERTa's padding-aware positions (padding_idx 1, as transformers hard-codes it),
no token types, and a T5-style relative position bias shared by all layers:
``encoder.relative_attention_bias`` [buckets, heads], indexed by the log-bucketed
distance between query and key and added to every layer's attention logits.

transformers buckets with 32 buckets and max distance 128 whatever
relative_attention_num_buckets says (MPNetEncoder.compute_position_bias never
passes it on); the config only sizes the table, so a table smaller than 32 rows
is refused. The bucket of each distance 0..128 is a constant lookup table
(float32 logs evaluated once, as torch does); the graph computes the distances
of the actual sequence length and gathers.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.attention_mask import padding_mask
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.bert import BertIntermediate, BertResidualOutput, bidirectional_attention
from mobius.models.bert import padded_positions
from mobius.models.family import ModelFamily
from mobius.tasks import encoder
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import VOCAB_SIZE

PADDING_IDX = 1  #: MPNetEmbeddings' padding_idx (not config.pad_token_id)
BUCKETS, MAX_DISTANCE = 32, 128  #: what transformers' compute_position_bias uses


def bucket_table(num_buckets: int = BUCKETS, max_distance: int = MAX_DISTANCE) -> np.ndarray:
    """The bucket of |query - key| = 0..max_distance, one direction (int64). Exact below
    half the directional buckets, log-spaced up to max_distance, clamped past it."""
    half = num_buckets // 2
    exact = half // 2
    distance = np.arange(max_distance + 1)
    with np.errstate(divide="ignore"):
        scaled = (np.log(distance.astype(np.float32) / np.float32(exact))
                  / np.float32(math.log(max_distance / exact)) * np.float32(half - exact))
    large = np.minimum(exact + np.where(distance < exact, 0, scaled).astype(np.int64), half - 1)
    return np.where(distance < exact, distance, large).astype(np.int64)


def relative_buckets(op, hidden):
    """[seq, seq] bucket of (query i, key j): keys before the query use the upper half."""
    seq = op.Squeeze(op.Shape(hidden, start=1, end=2))
    positions = op.Range(op.Constant(value_int=0), seq, op.Constant(value_int=1))
    ahead = op.Sub(op.Unsqueeze(positions, op.Constant(value_ints=[1])),
                   op.Unsqueeze(positions, op.Constant(value_ints=[0])))  # query - key
    distance = op.Min(op.Abs(ahead), op.Constant(value_int=MAX_DISTANCE))
    table = op.Constant(value=ir.tensor(bucket_table()))
    upper = op.Mul(op.Cast(op.Less(ahead, op.Constant(value_int=0)), to=ir.DataType.INT64),
                   op.Constant(value_int=BUCKETS // 2))
    return op.Add(upper, op.Gather(table, distance, axis=0))


class MPNetEmbeddings(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = Embedding(config.max_position_embeddings, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, input_ids):
        positions = padded_positions(op, input_ids, PADDING_IDX)
        hidden = op.Add(self.word_embeddings(op, input_ids),
                        self.position_embeddings(op, positions))
        return self.LayerNorm(op, hidden)


class MPNetSelfAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.q = Linear(hidden, hidden, True)
        self.k = Linear(hidden, hidden, True)
        self.v = Linear(hidden, hidden, True)
        self.o = Linear(hidden, hidden, True)

    def forward(self, op, hidden, bias):
        attn = bidirectional_attention(op, (self.q, self.k, self.v), hidden, bias,
                                       self.num_heads, self.head_dim)
        return self.o(op, attn)


class MPNetAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.attn = MPNetSelfAttention(config)
        self.LayerNorm = LayerNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, hidden, bias):
        return self.LayerNorm(op, op.Add(self.attn(op, hidden, bias), hidden))


class MPNetLayer(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.attention = MPNetAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertResidualOutput(config.intermediate_size, config)

    def forward(self, op, hidden, bias):
        attention = self.attention(op, hidden, bias)
        return self.output(op, self.intermediate(op, attention), attention)


class MPNetEncoder(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.layer = nn.ModuleList([MPNetLayer(config) for _ in range(config.num_hidden_layers)])
        self.relative_attention_bias = Embedding(config.options.relative_attention_num_buckets,
                                                 config.num_attention_heads)

    def forward(self, op, hidden, mask):
        """``mask`` [batch, 1, seq, seq] + the shared position bias [1, heads, seq, seq]."""
        bias = self.relative_attention_bias(op, relative_buckets(op, hidden))  # [seq, seq, heads]
        bias = op.Unsqueeze(op.Transpose(bias, perm=[2, 0, 1]), op.Constant(value_ints=[0]))
        bias = op.Add(mask, bias)
        for layer in self.layer:
            hidden = layer(op, hidden, bias)
        return hidden


class MPNetModel(nn.Module):
    """The encoder module protocol of mobius/tasks/encoder.py."""

    text_inputs = ("input_ids", "attention_mask")

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.embeddings = MPNetEmbeddings(config)
        self.encoder = MPNetEncoder(config)

    def forward(self, op, input_ids, attention_mask):
        mask = padding_mask(op, attention_mask, get_build_dtype())
        return self.encoder(op, self.embeddings(op, input_ids), mask)


@dataclasses.dataclass(frozen=True)
class MPNetOptions:
    relative_attention_num_buckets: int = BUCKETS  #: the bias table's rows (checked below)


def relative_attention_num_buckets(raw) -> int:
    """The bias table's rows: at least the 32 buckets transformers indexes."""
    rows = positive_int("relative_attention_num_buckets",
                        raw.get("relative_attention_num_buckets", BUCKETS))
    if rows < BUCKETS:
        raise ConfigError(f"config.json: 'relative_attention_num_buckets' is {rows}; MPNet "
                          f"indexes {BUCKETS} relative-position buckets, so it must be "
                          f">= {BUCKETS}")
    return rows


def _overrides(raw):
    relative_attention_num_buckets(raw)  # checked before any graph is built
    return {"rms_norm_eps": float(raw.get("layer_norm_eps", 1e-12)),
            "hidden_act": raw.get("hidden_act", "gelu")}


FAMILY = ModelFamily(
    name="mpnet", model_types=("mpnet",),
    architectures=("MPNetModel",),
    module=MPNetModel, task=encoder.TASK, tiny_preset="tiny-mpnet",
    checkpoint_prefixes=("", "mpnet."),
    ignored_tensors=lambda config: (
        IgnoredTensors(r"(mpnet\.)?pooler\..*", "feature extraction outputs hidden states"),
        IgnoredTensors(r"lm_head\..*", "MPNetForMaskedLM head: not part of feature extraction"),
        IgnoredTensors(r"(mpnet\.)?embeddings\.position_ids",
                       "buffer of older checkpoints: positions are computed"),
    ),
    config_overrides=_overrides, options=MPNetOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # MPNet: positions count from padding_idx 1 + 1 (hence 258); 40 bias-table rows where
    # transformers indexes 32 buckets: reading the table size as the bucket count fails.
    "tiny-mpnet": {
        "model_type": "mpnet", "architectures": ["MPNetModel"], "vocab_size": VOCAB_SIZE,
        "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 258,
        "relative_attention_num_buckets": 40, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
        "pad_token_id": 1,
    },
}
