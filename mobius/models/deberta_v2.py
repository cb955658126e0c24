"""DeBERTa-v2 / v3 text- and token-classification: BERT's post-norm layers with disentangled
attention. Besides content-to-content q.k, each layer adds content-to-position (c2p:
the query against the relative-position embedding of the key's distance) and
position-to-content (p2c: the key against the embedding of the query's distance),
all scaled by sqrt(head_dim * (1 + number of those terms)).

Relative distances i - j are log-bucketed past position_buckets // 2 (when
position_buckets > 0), then clamped to the ``2 * span`` rows of
``encoder.rel_embeddings`` (LayerNorm'ed when norm_rel_ebd has layer_norm).
share_att_key projects those rows with the layer's own query/key projections, else
with pos_query_proj / pos_key_proj. The bucket of each |distance| is a constant table
(float32 logs evaluated once, as torch does); the graph gathers it for the actual
length. Embeddings: words (+ positions if position_biased_input, + token types if
type_vocab_size > 0, through embed_proj if embedding_size differs), LayerNorm, times
the mask. The first layer's convolution (conv_kernel_size > 0) is not supported.
Heads (transformers' names, body under ``deberta.``): sequences ``pooler.dense`` +
pooler_hidden_act on the first token, then ``classifier``; tokens ``classifier``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention import scaled_dot_product_attention
from mobius.components.attention_mask import padding_mask
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models.bert import BertIntermediate, BertResidualOutput, first_token
from mobius.models.family import ModelFamily
from mobius.tasks import encoder, text_classification, token_classification
from mobius.tasks.labels import LabelOptions, label_count
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import VOCAB_SIZE, classifier_heads


@dataclasses.dataclass(frozen=True)
class DebertaSettings:
    """The config.json switches of the disentangled attention and the embeddings: the
    families' options (refused or inconsistent values fail as the config is read)."""

    relative_attention: bool = False
    pos_att_type: tuple[str, ...] | str = ()  #: c2p / p2c (older configs: "p2c|c2p")
    share_att_key: bool = False
    position_buckets: int = -1
    max_relative: int = dataclasses.field(default=-1, metadata={"key": "max_relative_positions"})
    max_position_embeddings: int = 512
    norm_rel_ebd: str = "none"
    position_biased_input: bool = True
    type_vocab: int = dataclasses.field(default=0, metadata={"key": "type_vocab_size"})
    hidden_size: int = 0
    num_attention_heads: int = 0
    embedding: int | None = dataclasses.field(default=None, metadata={"key": "embedding_size"})
    pooler_hidden_size: int | None = None  #: refused unless hidden_size
    attention_head_size: int | None = None  #: refused unless hidden_size / heads
    conv_kernel_size: int = 0  #: refused when > 0

    def __post_init__(self):
        unknown = sorted(set(self.kinds) - {"c2p", "p2c"})
        if unknown:
            raise UnsupportedModelError(f"config.json: pos_att_type {unknown} is not supported "
                                        f"(supported: c2p, p2c)")
        if self.conv_kernel_size > 0:
            raise UnsupportedModelError("config.json: DeBERTa-v2's convolution layer "
                                        "(conv_kernel_size > 0) is not supported")
        hidden, heads = self.hidden_size, self.num_attention_heads
        for key, value, expected in (
                ("pooler_hidden_size", self.pooler_hidden_size, hidden),
                ("attention_head_size", self.attention_head_size, hidden // max(heads, 1))):
            if value not in (None, expected):
                raise UnsupportedModelError(f"config.json: {key} {value} != {expected} is not "
                                            f"supported")
        buckets = self.position_buckets
        if buckets > 0 and self.max_relative_positions - 1 <= buckets // 2:
            raise ConfigError(f"config.json: max_relative_positions "
                              f"{self.max_relative_positions} must exceed position_buckets "
                              f"// 2 + 1 ({buckets // 2 + 1}) for log-bucketed positions")

    @property
    def kinds(self) -> tuple[str, ...]:
        if isinstance(self.pos_att_type, str):  # the older "p2c|c2p" spelling
            return tuple(k.strip() for k in self.pos_att_type.lower().split("|"))
        return self.pos_att_type

    @property
    def c2p(self) -> bool:
        return "c2p" in self.kinds

    @property
    def p2c(self) -> bool:
        return "p2c" in self.kinds

    @property
    def max_relative_positions(self) -> int:
        return self.max_relative if self.max_relative >= 1 else self.max_position_embeddings

    @property
    def norm_rel_embeddings(self) -> bool:
        return "layer_norm" in [x.strip() for x in self.norm_rel_ebd.lower().split("|")]

    @property
    def type_vocab_size(self) -> int:
        return max(self.type_vocab, 0)

    @property
    def embedding_size(self) -> int:
        return self.hidden_size if self.embedding is None else self.embedding

    @property
    def span(self) -> int:
        """Rows of rel_embeddings per direction."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions

    @property
    def scale_factor(self) -> int:
        return 1 + self.c2p + self.p2c


@dataclasses.dataclass(frozen=True)
class DebertaClassifierOptions(DebertaSettings, LabelOptions):
    pooler_hidden_act: str = "gelu"


def settings(config: ArchitectureConfig) -> DebertaSettings:
    return config.options


def bucket_table(bucket_size: int, max_position: int) -> np.ndarray:
    """The bucket of |distance| = 0, 1, ... up to the first one every longer distance
    shares after clamping (int64): exact to bucket_size // 2, log-spaced beyond."""
    mid = bucket_size // 2
    limit = 2 * mid + 1  # from here on both directions clamp to the table's ends
    scale = np.log(np.float32((max_position - 1) / mid))
    out, distance = [], 0
    while True:
        if distance <= mid:
            value = distance
        else:
            ratio = np.log(np.float32(distance) / np.float32(mid)) / scale
            value = int(np.ceil(ratio * np.float32(mid - 1))) + mid
        out.append(value)
        if value >= limit:
            return np.array(out, dtype=np.int64)
        distance += 1


def position_index(op, hidden, s: DebertaSettings):
    """[seq, seq] row of rel_embeddings for (query i, key j): bucket(i - j) + span, clamped."""
    seq = op.Squeeze(op.Shape(hidden, start=1, end=2))
    positions = op.Range(op.Constant(value_int=0), seq, op.Constant(value_int=1))
    relative = op.Sub(op.Unsqueeze(positions, op.Constant(value_ints=[1])),
                      op.Unsqueeze(positions, op.Constant(value_ints=[0])))
    if s.position_buckets > 0:
        table = bucket_table(s.position_buckets, s.max_relative_positions)
        distance = op.Min(op.Abs(relative), op.Constant(value_int=len(table) - 1))
        relative = op.Mul(op.Sign(relative),
                          op.Gather(op.Constant(value=ir.tensor(table)), distance, axis=0))
    return op.Clip(op.Add(relative, op.Constant(value_int=s.span)), op.Constant(value_int=0),
                   op.Constant(value_int=2 * s.span - 1))


class DebertaV2Embeddings(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        s = settings(config)
        size = s.embedding_size
        self.word_embeddings = Embedding(config.vocab_size, size)
        self.position_embeddings = (Embedding(config.max_position_embeddings, size)
                                    if s.position_biased_input else None)
        self.token_type_embeddings = (Embedding(s.type_vocab_size, size)
                                      if s.type_vocab_size else None)
        self.embed_proj = (Linear(size, config.hidden_size)
                           if size != config.hidden_size else None)
        self.LayerNorm = LayerNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        hidden = self.word_embeddings(op, input_ids)
        if self.position_embeddings is not None:
            one = op.Constant(value_int=1)
            ones = op.Add(op.Mul(input_ids, op.Constant(value_int=0)), one)
            hidden = op.Add(hidden, self.position_embeddings(op, op.Sub(op.CumSum(ones, one), one)))
        if self.token_type_embeddings is not None:
            hidden = op.Add(hidden, self.token_type_embeddings(op, token_type_ids))
        if self.embed_proj is not None:
            hidden = self.embed_proj(op, hidden)
        hidden = self.LayerNorm(op, hidden)
        mask = op.Unsqueeze(op.CastLike(attention_mask, hidden), op.Constant(value_ints=[-1]))
        return op.Mul(hidden, mask)


class DisentangledSelfAttention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        hidden, s = config.hidden_size, settings(config)
        self.s = s
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.query_proj = Linear(hidden, hidden, True)
        self.key_proj = Linear(hidden, hidden, True)
        self.value_proj = Linear(hidden, hidden, True)
        relative = s.relative_attention and not s.share_att_key
        self.pos_key_proj = Linear(hidden, hidden, True) if relative and s.c2p else None
        self.pos_query_proj = Linear(hidden, hidden, True) if relative and s.p2c else None

    def _heads(self, op, x):
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def _position_scores(self, op, states, rel, proj, index):
        """states [B, H, S, D] against the projected rel rows, gathered at ``index`` [S, S]."""
        pos = self._heads(op, proj(op, op.Unsqueeze(rel, op.Constant(value_ints=[0]))))
        scores = op.MatMul(states, op.Transpose(pos, perm=[0, 1, 3, 2]))  # [B, H, S, 2 span]
        shape = op.Concat(op.Shape(states, start=0, end=3), op.Shape(states, start=2, end=3),
                          axis=0)
        return op.GatherElements(scores, op.Expand(index, shape), axis=-1)

    def forward(self, op, hidden, mask, rel, index):
        s = self.s
        q, k, v = (self._heads(op, p(op, hidden))
                   for p in (self.query_proj, self.key_proj, self.value_proj))
        scale = 1.0 / math.sqrt(self.head_dim * s.scale_factor)
        bias = None
        if s.relative_attention and s.c2p:
            proj = self.key_proj if s.share_att_key else self.pos_key_proj
            bias = self._position_scores(op, q, rel, proj, index)
        if s.relative_attention and s.p2c:
            proj = self.query_proj if s.share_att_key else self.pos_query_proj
            p2c = self._position_scores(op, k, rel, proj, op.Transpose(index, perm=[1, 0]))
            p2c = op.Transpose(p2c, perm=[0, 1, 3, 2])
            bias = p2c if bias is None else op.Add(bias, p2c)
        if bias is not None:
            mask = op.Add(mask, op.Mul(bias, op.CastLike(op.Constant(value_float=scale), bias)))
        attn, _, _ = scaled_dot_product_attention(op, q, k, v, mask, scale=scale)
        attn = op.Transpose(attn, perm=[0, 2, 1, 3])
        return op.Reshape(attn, op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))


class DebertaV2Attention(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.self = DisentangledSelfAttention(config)
        self.output = BertResidualOutput(config.hidden_size, config)

    def forward(self, op, hidden, mask, rel, index):
        return self.output(op, self.self(op, hidden, mask, rel, index), hidden)


class DebertaV2Layer(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.attention = DebertaV2Attention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertResidualOutput(config.intermediate_size, config)

    def forward(self, op, hidden, mask, rel, index):
        attention = self.attention(op, hidden, mask, rel, index)
        return self.output(op, self.intermediate(op, attention), attention)


class RelativeEmbeddings(nn.Module):
    """The [2 * span, hidden] table every layer projects whole (no lookup)."""

    def __init__(self, rows: int, hidden: int):
        super().__init__()
        self.weight = Weight([rows, hidden])

    def forward(self, op):
        return op.Identity(self.weight)


class ContextPooler(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.activation = config.options.pooler_hidden_act
        self.dense = Linear(config.hidden_size, config.hidden_size, True)

    def forward(self, op, hidden):
        return apply_activation(op, self.dense(op, first_token(op, hidden)), self.activation)


class DebertaV2Encoder(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        s = settings(config)
        self.s = s
        self.layer = nn.ModuleList([DebertaV2Layer(config)
                                    for _ in range(config.num_hidden_layers)])
        self.rel_embeddings = (RelativeEmbeddings(2 * s.span, config.hidden_size)
                               if s.relative_attention else None)
        self.LayerNorm = (LayerNorm(config.hidden_size, config.rms_norm_eps)
                          if s.relative_attention and s.norm_rel_embeddings else None)

    def forward(self, op, hidden, mask):
        rel = index = None
        if self.rel_embeddings is not None:
            rel = self.rel_embeddings(op)
            if self.LayerNorm is not None:
                rel = self.LayerNorm(op, rel)
            index = position_index(op, hidden, self.s)
        for layer in self.layer:
            hidden = layer(op, hidden, mask, rel, index)
        return hidden


class DebertaV2Model(nn.Module):
    """The encoder module protocol of mobius/tasks/encoder.py; token_type_ids only when
    the checkpoint has token types."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.text_inputs = text_inputs(config)
        self.embeddings = DebertaV2Embeddings(config)
        self.encoder = DebertaV2Encoder(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        mask = padding_mask(op, attention_mask, get_build_dtype())
        hidden = self.embeddings(op, input_ids, attention_mask, token_type_ids)
        return self.encoder(op, hidden, mask)


def text_inputs(config: ArchitectureConfig) -> tuple[str, ...]:
    return ("input_ids", "attention_mask") + (
        ("token_type_ids",) if settings(config).type_vocab_size else ())


class DebertaV2ForSequenceClassification(nn.Module):
    """``pooler.dense`` + pooler_hidden_act on the first token, then ``classifier``."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.text_inputs = text_inputs(config)
        self.deberta = DebertaV2Model(config)
        self.pooler = ContextPooler(config)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        return self.classifier(op, self.pooler(op, self.deberta(op, *inputs)))


class DebertaV2ForTokenClassification(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.text_inputs = text_inputs(config)
        self.deberta = DebertaV2Model(config)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        return self.classifier(op, self.deberta(op, *inputs))


def config_overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {"rms_norm_eps": float(raw.get("layer_norm_eps", 1e-7)),
            "hidden_act": raw.get("hidden_act", "gelu")}


def _family(kind: str, module, task, architecture: str) -> ModelFamily:
    return ModelFamily(name=f"deberta-v2-{kind}", model_types=(), architectures=(architecture,),
                       module=module, task=task, tiny_preset=f"tiny-deberta-v2-{kind}",
                       cohorts=("every-dtype",),
                       config_overrides=config_overrides, options=DebertaClassifierOptions,
                       ignored_tensors=_ignored)


def _ignored(config: ArchitectureConfig,
             prefix: str = r"deberta\.") -> tuple[IgnoredTensors, ...]:
    s = settings(config)
    if s.norm_rel_embeddings and not s.relative_attention:
        return (IgnoredTensors(prefix + r"encoder\.LayerNorm\.(weight|bias)",
                               "norm_rel_ebd without relative_attention: no table to normalize"),)
    return ()


def _base_ignored(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    """A task checkpoint (``deberta.`` body) read as the base model: its heads stay unread."""
    heads = IgnoredTensors(r"(pooler|classifier|cls|lm_predictions|mask_predictions)\..*",
                           "task heads: not part of feature extraction")
    return (heads,) + _ignored(config, prefix=r"(deberta\.)?")


#: feature extraction (DebertaV2Model: last_hidden_state, sentence embeddings where the
#: checkpoint carries sentence-transformers pooling)
BASE = ModelFamily(name="deberta-v2", model_types=("deberta-v2",),
                   architectures=("DebertaV2Model",), module=DebertaV2Model, task=encoder.TASK,
                   tiny_preset="tiny-deberta-v2", checkpoint_prefixes=("", "deberta."),
                   config_overrides=config_overrides, options=DebertaSettings,
                   ignored_tensors=_base_ignored)

FAMILIES = (
    _family("seq-cls", DebertaV2ForSequenceClassification, text_classification.TASK,
            "DebertaV2ForSequenceClassification"),
    _family("tok-cls", DebertaV2ForTokenClassification, token_classification.TASK,
            "DebertaV2ForTokenClassification"),
    BASE,
)

# DeBERTa-v3 style: relative attention only (no absolute positions, no token types),
# shared attention keys, both c2p and p2c, LayerNorm'ed relative embeddings; 6 buckets
# (exact to 3, log-spaced to max distance 16): the test sequence reaches the log range.
_TINY_DEBERTA = {
    "model_type": "deberta-v2", "vocab_size": VOCAB_SIZE, "hidden_size": 64,
    "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
    "max_position_embeddings": 128, "type_vocab_size": 0, "hidden_act": "gelu",
    "layer_norm_eps": 1e-7, "pad_token_id": 0, "relative_attention": True,
    "position_buckets": 6, "max_relative_positions": 16, "pos_att_type": ["p2c", "c2p"],
    "share_att_key": True, "norm_rel_ebd": "layer_norm", "position_biased_input": False,
    "pooler_hidden_act": "gelu",
}
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-deberta-v2": {**_TINY_DEBERTA, "architectures": ["DebertaV2Model"]},
    **classifier_heads("tiny-deberta-v2", _TINY_DEBERTA, "DebertaV2"),
}
