"""BERT, RoBERTa and XLM-RoBERTa (feature extraction, role ``encoder``): learned
word/position/token-type embeddings, post-norm encoder layers (LayerNorm(x +
sublayer(x)), the pattern SkipLayerNormalization fusion catches), GELU MLP,
bidirectional attention with a padding mask. Module names mirror transformers'
BertModel; checkpoints saved from *For* heads carry a ``bert.`` / ``roberta.``
prefix, which the families accept."""

from __future__ import annotations

import dataclasses

import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention import scaled_dot_product_attention
from mobius.components.attention_mask import padding_mask
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.models.family import ModelFamily
from mobius.tasks import encoder
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import VOCAB_SIZE


def padded_positions(op, input_ids, padding_idx: int):
    """RoBERTa's numbering: real tokens (input_ids != padding_idx) count up from
    padding_idx + 1, padding tokens sit at padding_idx."""
    pad = op.Constant(value_int=padding_idx)
    real = op.Cast(op.Not(op.Equal(input_ids, pad)), to=ir.DataType.INT64)
    return op.Add(op.Mul(op.CumSum(real, op.Constant(value_int=1)), real), pad)


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm.

    ``padding_idx`` None: positions 0..S-1 (BERT). Otherwise RoBERTa's numbering:
    real tokens (input_ids != padding_idx) count up from padding_idx + 1, padding
    tokens sit at padding_idx. ``token_types``: the graph takes token_type_ids
    (BERT); otherwise every token is type 0 (RoBERTa, whose tokenizers send none).
    """

    def __init__(self, config: ArchitectureConfig, padding_idx: int | None = None,
                 token_types: bool = True):
        super().__init__()
        hidden = config.hidden_size
        self.padding_idx, self.token_types = padding_idx, token_types
        self.word_embeddings = Embedding(config.vocab_size, hidden)
        self.position_embeddings = Embedding(config.max_position_embeddings, hidden)
        self.token_type_embeddings = Embedding(config.options.type_vocab_size, hidden)
        self.LayerNorm = LayerNorm(hidden, config.rms_norm_eps)

    def _positions(self, op, input_ids):
        if self.padding_idx is None:
            # 0..S-1 as a running count over input_ids ([batch, seq], so shape
            # inference keeps the named dims the Skip*Norm fusions check)
            ones = op.Add(op.Mul(input_ids, op.Constant(value_int=0)), op.Constant(value_int=1))
            return op.Sub(op.CumSum(ones, op.Constant(value_int=1)), op.Constant(value_int=1))
        return padded_positions(op, input_ids, self.padding_idx)

    def forward(self, op, input_ids, token_type_ids=None):
        positions = self._positions(op, input_ids)
        hidden = op.Add(self.word_embeddings(op, input_ids), self.position_embeddings(op, positions))
        if token_type_ids is None:  # type 0 everywhere: one row, broadcast
            token_type_ids = op.Constant(value_ints=[0])
        hidden = op.Add(hidden, self.token_type_embeddings(op, token_type_ids))
        return self.LayerNorm(op, hidden)


def bidirectional_attention(op, projections, hidden, mask, num_heads: int, head_dim: int):
    """Multi-head attention over the whole sequence: q, k, v = projections(hidden)."""
    def heads(x):
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, num_heads, head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    q, k, v = (heads(proj(op, hidden)) for proj in projections)
    attn, _, _ = scaled_dot_product_attention(op, q, k, v, mask, scale=head_dim**-0.5)
    attn = op.Transpose(attn, perm=[0, 2, 1, 3])
    return op.Reshape(attn, op.Constant(value_ints=[0, 0, num_heads * head_dim]))


class BertSelfAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.query = Linear(hidden, hidden, True)
        self.key = Linear(hidden, hidden, True)
        self.value = Linear(hidden, hidden, True)

    def forward(self, op, hidden, mask):
        return bidirectional_attention(op, (self.query, self.key, self.value), hidden, mask,
                                       self.num_heads, self.head_dim)


class BertResidualOutput(nn.Module):
    """LayerNorm(residual + dense(x)): BertSelfOutput and BertOutput."""

    def __init__(self, in_features: int, config: ArchitectureConfig):
        super().__init__()
        self.dense = Linear(in_features, config.hidden_size, True)
        self.LayerNorm = LayerNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, x, residual):
        return self.LayerNorm(op, op.Add(self.dense(op, x), residual))


class BertAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertResidualOutput(config.hidden_size, config)

    def forward(self, op, hidden, mask):
        return self.output(op, self.self(op, hidden, mask), hidden)


class BertIntermediate(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.activation = config.hidden_act
        self.dense = Linear(config.hidden_size, config.intermediate_size, True)

    def forward(self, op, x):
        return apply_activation(op, self.dense(op, x), self.activation)


class BertLayer(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertResidualOutput(config.intermediate_size, config)

    def forward(self, op, hidden, mask):
        attention = self.attention(op, hidden, mask)
        return self.output(op, self.intermediate(op, attention), attention)


class BertEncoder(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, hidden, mask):
        for layer in self.layer:
            hidden = layer(op, hidden, mask)
        return hidden


def first_token(op, hidden):
    """hidden [batch, seq, hidden] -> its first token [batch, hidden]."""
    return op.Squeeze(op.Gather(hidden, op.Constant(value_ints=[0]), axis=1),
                      op.Constant(value_ints=[1]))


class BertPooler(nn.Module):
    """tanh(dense(first token)): what BertForSequenceClassification classifies."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, True)

    def forward(self, op, hidden):
        return op.Tanh(self.dense(op, first_token(op, hidden)))


class BertModel(nn.Module):
    """The encoder module protocol of mobius/tasks/encoder.py: ``text_inputs`` and
    forward(op, *text_inputs) -> last_hidden_state. ``pooler``: also hold BertPooler
    (``pooler.*``), for the sequence classifier."""

    text_inputs = ("input_ids", "attention_mask", "token_type_ids")

    def __init__(self, config: ArchitectureConfig, pooler: bool = False):
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if pooler else None

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        mask = padding_mask(op, attention_mask, get_build_dtype())
        return self.encoder(op, self.embeddings(op, input_ids, token_type_ids), mask)


class RobertaModel(BertModel):
    """BERT with RoBERTa's padding-aware positions and no token_type_ids input."""

    text_inputs = ("input_ids", "attention_mask")

    def __init__(self, config: ArchitectureConfig):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config, padding_idx=config.pad_token_id or 0,
                                         token_types=False)


@dataclasses.dataclass(frozen=True)
class BertOptions:
    type_vocab_size: int = 2


def _overrides(raw):
    return {"rms_norm_eps": float(raw.get("layer_norm_eps", 1e-12)),
            "hidden_act": raw.get("hidden_act", "gelu")}


def _ignored(prefix: str, heads: str):
    """The checkpoint parts feature extraction does not read (pooler, task heads)."""
    def ignored(config):
        return (
            IgnoredTensors(rf"({prefix}\.)?pooler\..*", "feature extraction outputs hidden states"),
            IgnoredTensors(heads, "pretraining / task heads: not part of feature extraction"),
            IgnoredTensors(rf"({prefix}\.)?embeddings\.position_ids",
                           "buffer of older checkpoints: positions are computed"),
        )
    return ignored


FAMILY = ModelFamily(
    name="bert", cohorts=("every-dtype",), model_types=("bert",),
    architectures=("BertModel",),
    module=BertModel, task=encoder.TASK, tiny_preset="tiny-bert",
    checkpoint_prefixes=("", "bert."),
    ignored_tensors=_ignored("bert", r"cls\..*"),
    config_overrides=_overrides, options=BertOptions,
)

ROBERTA = ModelFamily(
    name="roberta", model_types=("roberta",),
    architectures=("RobertaModel",),
    module=RobertaModel, task=encoder.TASK, tiny_preset="tiny-roberta",
    checkpoint_prefixes=("", "roberta."),
    ignored_tensors=_ignored("roberta", r"lm_head\..*"),
    config_overrides=_overrides, options=BertOptions,
)

XLM_ROBERTA = dataclasses.replace(
    ROBERTA, name="xlm-roberta", model_types=("xlm-roberta",),
    architectures=("XLMRobertaModel",), tiny_preset="tiny-xlm-roberta")

#: what the registry reads from this module, in lookup order
FAMILIES = (FAMILY, ROBERTA, XLM_ROBERTA)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-bert": {
        "model_type": "bert", "architectures": ["BertModel"], "vocab_size": VOCAB_SIZE,
        "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 256, "type_vocab_size": 2,
        "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0,
    },
    # RoBERTa numbers positions from pad_token_id + 1: pad 1 (its real value) makes
    # the offset matter; max_position_embeddings leaves room for the offset.
    "tiny-roberta": {
        "model_type": "roberta", "architectures": ["RobertaModel"], "vocab_size": VOCAB_SIZE,
        "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 258, "type_vocab_size": 1,
        "hidden_act": "gelu", "layer_norm_eps": 1e-5, "pad_token_id": 1,
    },
    "tiny-xlm-roberta": {
        "model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "intermediate_size": 172,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 258,
        "type_vocab_size": 1, "hidden_act": "gelu", "layer_norm_eps": 1e-5, "pad_token_id": 1,
    },
}
