"""Classification heads on the encoder families, with transformers' module names:
text-classification (incl. cross-encoder rerankers: num_labels 1) and
token-classification. Dropout is an identity at inference; the labels come from
config.json (id2label) and go into the package metadata (mobius/tasks/labels.py).

* ``BertFor*``: ``bert.*``; sequences: ``bert.pooler.dense`` + tanh on the first
  token, then ``classifier``; tokens: ``classifier`` on every token.
* ``(XLM)RobertaFor*``: ``roberta.*``; sequences: ``classifier.dense`` + tanh on the
  first token, ``classifier.out_proj``; tokens: ``classifier``.
* ``DistilBertFor*``: ``distilbert.*``; sequences: ``pre_classifier`` + ReLU on the
  first token, ``classifier``; tokens: ``classifier``.
* ``MPNetFor*``: ``mpnet.*``; as RoBERTa's (``classifier.dense``, ``classifier.out_proj``).
"""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.linear import Linear
from mobius.config.architecture import ArchitectureConfig
from mobius.models import bert, distilbert, mpnet
from mobius.models.bert import first_token
from mobius.models.family import ModelFamily
from mobius.tasks import text_classification, token_classification
from mobius.tasks.labels import LabelOptions, label_count
from mobius.tiny.bases import classifier_heads


@dataclasses.dataclass(frozen=True)
class BertClassifierOptions(bert.BertOptions, LabelOptions):
    pass


@dataclasses.dataclass(frozen=True)
class MPNetClassifierOptions(mpnet.MPNetOptions, LabelOptions):
    pass


#: a classifier's options: its base family's (by ModelFamily.options) and the labels
_WITH_LABELS = {bert.BertOptions: BertClassifierOptions, mpnet.MPNetOptions: MPNetClassifierOptions,
                None: LabelOptions}


class BertForSequenceClassification(nn.Module):
    text_inputs = bert.BertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.bert = bert.BertModel(config, pooler=True)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        return self.classifier(op, self.bert.pooler(op, self.bert(op, *inputs)))


class RobertaClassificationHead(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, True)
        self.out_proj = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, hidden):
        return self.out_proj(op, op.Tanh(self.dense(op, first_token(op, hidden))))


class RobertaForSequenceClassification(nn.Module):
    text_inputs = bert.RobertaModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.roberta = bert.RobertaModel(config)
        self.classifier = RobertaClassificationHead(config)

    def forward(self, op, *inputs):
        return self.classifier(op, self.roberta(op, *inputs))


class DistilBertForSequenceClassification(nn.Module):
    text_inputs = distilbert.DistilBertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.distilbert = distilbert.DistilBertModel(config)
        self.pre_classifier = Linear(config.hidden_size, config.hidden_size, True)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        first = first_token(op, self.distilbert(op, *inputs))
        return self.classifier(op, op.Relu(self.pre_classifier(op, first)))


class BertForTokenClassification(nn.Module):
    text_inputs = bert.BertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.bert = bert.BertModel(config)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        return self.classifier(op, self.bert(op, *inputs))


class RobertaForTokenClassification(nn.Module):
    text_inputs = bert.RobertaModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.roberta = bert.RobertaModel(config)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        return self.classifier(op, self.roberta(op, *inputs))


class DistilBertForTokenClassification(nn.Module):
    text_inputs = distilbert.DistilBertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.distilbert = distilbert.DistilBertModel(config)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        return self.classifier(op, self.distilbert(op, *inputs))


class MPNetForSequenceClassification(nn.Module):
    text_inputs = mpnet.MPNetModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.mpnet = mpnet.MPNetModel(config)
        self.classifier = RobertaClassificationHead(config)

    def forward(self, op, *inputs):
        return self.classifier(op, self.mpnet(op, *inputs))


class MPNetForTokenClassification(nn.Module):
    text_inputs = mpnet.MPNetModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.mpnet = mpnet.MPNetModel(config)
        self.classifier = Linear(config.hidden_size, label_count(config.options), True)

    def forward(self, op, *inputs):
        return self.classifier(op, self.mpnet(op, *inputs))


def _classifier(base: ModelFamily, kind: str, module, task, architectures) -> ModelFamily:
    """``base`` (an encoder family) with a head: matched by architecture name only."""
    return dataclasses.replace(
        base, name=f"{base.name}-{kind}", model_types=(), architectures=architectures,
        module=module, task=task, tiny_preset=f"tiny-{base.name}-{kind}",
        checkpoint_prefixes=("",), ignored_tensors=lambda config: (),
        options=_WITH_LABELS[base.options])


_SEQ, _TOK = text_classification.TASK, token_classification.TASK
FAMILIES = (
    _classifier(bert.FAMILY, "seq-cls", BertForSequenceClassification, _SEQ,
                ("BertForSequenceClassification",)),
    _classifier(bert.ROBERTA, "seq-cls", RobertaForSequenceClassification, _SEQ,
                ("RobertaForSequenceClassification",)),
    _classifier(bert.XLM_ROBERTA, "seq-cls", RobertaForSequenceClassification, _SEQ,
                ("XLMRobertaForSequenceClassification",)),
    _classifier(distilbert.FAMILY, "seq-cls", DistilBertForSequenceClassification, _SEQ,
                ("DistilBertForSequenceClassification",)),
    _classifier(bert.FAMILY, "tok-cls", BertForTokenClassification, _TOK,
                ("BertForTokenClassification",)),
    _classifier(bert.ROBERTA, "tok-cls", RobertaForTokenClassification, _TOK,
                ("RobertaForTokenClassification",)),
    _classifier(bert.XLM_ROBERTA, "tok-cls", RobertaForTokenClassification, _TOK,
                ("XLMRobertaForTokenClassification",)),
    _classifier(distilbert.FAMILY, "tok-cls", DistilBertForTokenClassification, _TOK,
                ("DistilBertForTokenClassification",)),
    _classifier(mpnet.FAMILY, "seq-cls", MPNetForSequenceClassification, _SEQ,
                ("MPNetForSequenceClassification",)),
    _classifier(mpnet.FAMILY, "tok-cls", MPNetForTokenClassification, _TOK,
                ("MPNetForTokenClassification",)),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    **classifier_heads("tiny-bert", bert.TINY_PRESETS["tiny-bert"], "Bert"),
    **classifier_heads("tiny-roberta", bert.TINY_PRESETS["tiny-roberta"], "Roberta"),
    **classifier_heads("tiny-xlm-roberta", bert.TINY_PRESETS["tiny-xlm-roberta"], "XLMRoberta"),
    **classifier_heads("tiny-distilbert", distilbert.TINY_PRESETS["tiny-distilbert"], "DistilBert"),
    **classifier_heads("tiny-mpnet", mpnet.TINY_PRESETS["tiny-mpnet"], "MPNet"),
}
