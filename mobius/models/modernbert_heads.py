"""ModernBERT's task heads, with transformers' module names (body under ``model.``):
each runs ``head`` (dense -> classifier_activation -> norm) before its last Linear.

* ``ModernBertForMaskedLM`` (fill-mask): ``head`` on every token, then ``decoder``
  (bias: decoder_bias), whose weight is the token embeddings unless
  tie_word_embeddings is false.
* ``ModernBertForSequenceClassification``: pools the last hidden state as
  classifier_pooling says ('cls': the first token; 'mean': over real tokens), then
  ``head``, ``classifier``.
* ``ModernBertForTokenClassification``: ``head`` and ``classifier`` on every token.
"""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.pooling import pool
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.models.bert import first_token
from mobius.models.family import ModelFamily
from mobius.models.modernbert import FAMILY, ModernBertModel, ModernBertPredictionHead, settings
from mobius.tasks import fill_mask, text_classification, token_classification
from mobius.tasks.labels import LabelOptions, label_count
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import classifier_heads, masked_lm_head
from mobius.models import modernbert

_TIED = "model.embeddings.tok_embeddings.weight"


class ModernBertForMaskedLM(nn.Module):
    text_inputs = ModernBertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = Linear(config.hidden_size, config.vocab_size, settings(config).decoder_bias,
                              checkpoint_name=_TIED if config.tie_word_embeddings else None)

    def forward(self, op, *inputs):
        return self.decoder(op, self.head(op, self.model(op, *inputs)))


class ModernBertForSequenceClassification(nn.Module):
    text_inputs = ModernBertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.pooling = settings(config).classifier_pooling
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, input_ids, attention_mask):
        hidden = self.model(op, input_ids, attention_mask)
        if self.pooling == "cls":
            pooled = first_token(op, hidden)
        else:
            pooled = pool(op, hidden, attention_mask, ("mean",), False, get_build_dtype())
        return self.classifier(op, self.head(op, pooled))


class ModernBertForTokenClassification(nn.Module):
    text_inputs = ModernBertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        return self.classifier(op, self.head(op, self.model(op, *inputs)))


@dataclasses.dataclass(frozen=True)
class ModernBertClassifierOptions(modernbert.ModernBertOptions, LabelOptions):
    """The body's switches and a classifier's labels."""


def _head(kind: str, module, task, architecture: str, ignored=lambda config: (),
          options: type | None = FAMILY.options) -> ModelFamily:
    """``options``: the body's (FAMILY.options), with a classifier's labels."""
    return dataclasses.replace(
        FAMILY, name=f"modernbert-{kind}", model_types=(), architectures=(architecture,),
        module=module, task=task, tiny_preset=f"tiny-modernbert-{kind}",
        checkpoint_prefixes=("",), ignored_tensors=ignored, options=options)


FAMILIES = (
    _head("seq-cls", ModernBertForSequenceClassification, text_classification.TASK,
          "ModernBertForSequenceClassification", options=ModernBertClassifierOptions),
    _head("tok-cls", ModernBertForTokenClassification, token_classification.TASK,
          "ModernBertForTokenClassification", options=ModernBertClassifierOptions),
    _head("mlm", ModernBertForMaskedLM, fill_mask.TASK, "ModernBertForMaskedLM",
          lambda config: (IgnoredTensors(r"decoder\.weight", "tied: the token embeddings"),)
          if config.tie_word_embeddings else ()),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    **classifier_heads("tiny-modernbert", modernbert.TINY_PRESETS["tiny-modernbert"], "ModernBert"),
    **masked_lm_head("tiny-modernbert", modernbert.TINY_PRESETS["tiny-modernbert"], "ModernBert"),
}
