"""BERT (feature extraction, role ``encoder``): learned word/position/token-type
embeddings, post-norm encoder layers (LayerNorm(x + sublayer(x)), the pattern
SkipLayerNormalization fusion catches), GELU MLP, bidirectional attention
with a padding mask. Module names mirror transformers' BertModel; checkpoints
saved from BertFor* heads carry a ``bert.`` prefix, which the family accepts."""

from __future__ import annotations

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
from mobius.weights.attach import IgnoredTensors


class BertEmbeddings(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, hidden)
        self.position_embeddings = Embedding(config.max_position_embeddings, hidden)
        self.token_type_embeddings = Embedding(config.raw.get("type_vocab_size", 2), hidden)
        self.LayerNorm = LayerNorm(hidden, config.rms_norm_eps)

    def forward(self, op, input_ids, token_type_ids):
        # positions 0..S-1 as a running count over input_ids ([batch, seq], so
        # shape inference keeps the named dims the Skip*Norm fusions check)
        ones = op.Add(op.Mul(input_ids, op.Constant(value_int=0)), op.Constant(value_int=1))
        positions = op.Sub(op.CumSum(ones, op.Constant(value_int=1)), op.Constant(value_int=1))
        hidden = op.Add(self.word_embeddings(op, input_ids), self.position_embeddings(op, positions))
        hidden = op.Add(hidden, self.token_type_embeddings(op, token_type_ids))
        return self.LayerNorm(op, hidden)


class BertSelfAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.query = Linear(hidden, hidden, True)
        self.key = Linear(hidden, hidden, True)
        self.value = Linear(hidden, hidden, True)

    def _heads(self, op, x):
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def forward(self, op, hidden, mask):
        q, k, v = (self._heads(op, proj(op, hidden)) for proj in (self.query, self.key, self.value))
        attn, _, _ = scaled_dot_product_attention(op, q, k, v, mask, scale=self.head_dim**-0.5)
        attn = op.Transpose(attn, perm=[0, 2, 1, 3])
        return op.Reshape(attn, op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))


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


class BertModel(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        mask = padding_mask(op, attention_mask, get_build_dtype())
        return self.encoder(op, self.embeddings(op, input_ids, token_type_ids), mask)


FAMILY = ModelFamily(
    name="bert", model_types=("bert",),
    architectures=("BertModel", "BertForMaskedLM", "BertForPreTraining"),
    module=BertModel, task="feature-extraction", tiny_preset="tiny-bert",
    checkpoint_prefixes=("", "bert."),
    ignored_tensors=lambda config: (
        IgnoredTensors(r"(bert\.)?pooler\..*", "feature extraction outputs last_hidden_state"),
        IgnoredTensors(r"cls\..*", "BertForMaskedLM / BertForPreTraining heads: not part of "
                       "feature extraction"),
        IgnoredTensors(r"(bert\.)?embeddings\.position_ids",
                       "buffer of older checkpoints: positions are 0..seq-1, computed"),
    ),
    config_overrides=lambda raw: {"rms_norm_eps": float(raw.get("layer_norm_eps", 1e-12)),
                                  "hidden_act": raw.get("hidden_act", "gelu")},
)
