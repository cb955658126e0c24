"""Masked-LM heads (fill-mask) on the encoder families, with transformers' module names.
Each head is dense -> activation -> LayerNorm -> decoder to the vocabulary; the decoder's
weight is the word-embedding table unless tie_word_embeddings is false (transformers'
default for these families: true); see _decoder for where its bias is saved.

* ``BertForMaskedLM``: ``bert.*``; ``cls.predictions.transform.{dense,LayerNorm}``
  (activation: hidden_act), ``cls.predictions.decoder``, bias ``cls.predictions.bias``.
* ``(XLM)RobertaForMaskedLM``: ``roberta.*``; ``lm_head.{dense,layer_norm,decoder}``
  (activation: gelu), bias ``lm_head.bias``.
* ``MPNetForMaskedLM``: ``mpnet.*``; as RoBERTa's (``lm_head.*``, bias ``lm_head.bias``).
* ``DistilBertForMaskedLM``: ``distilbert.*``; ``vocab_transform`` (activation: the
  config's), ``vocab_layer_norm``, ``vocab_projector``.
"""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.config.architecture import ArchitectureConfig
from mobius.models import bert, distilbert, mpnet
from mobius.models.family import ModelFamily
from mobius.tasks import fill_mask
from mobius.weights.attach import IgnoredTensors
from mobius.tiny.bases import masked_lm_head


def _decoder(config: ArchitectureConfig, tied_to: str, tied_bias: str | None = None) -> Linear:
    """The vocabulary projection. Tied (the default), transformers saves its weight as the
    word embeddings and its bias once, as the head's ``tied_bias``; untied, both under the
    decoder's own names (and the head's bias, which forward never reads, beside them)."""
    decoder = Linear(config.hidden_size, config.vocab_size, True,
                     checkpoint_name=tied_to if config.tie_word_embeddings else None)
    if config.tie_word_embeddings and tied_bias is not None:
        decoder.bias.checkpoint_name = tied_bias
    return decoder


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.activation = config.hidden_act
        self.dense = Linear(config.hidden_size, config.hidden_size, True)
        self.LayerNorm = LayerNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, x):
        return self.LayerNorm(op, apply_activation(op, self.dense(op, x), self.activation))


class BertLMPredictionHead(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = _decoder(config, "bert.embeddings.word_embeddings.weight",
                                "cls.predictions.bias")

    def forward(self, op, x):
        return self.decoder(op, self.transform(op, x))


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)

    def forward(self, op, x):
        return self.predictions(op, x)


class BertForMaskedLM(nn.Module):
    text_inputs = bert.BertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.bert = bert.BertModel(config)
        self.cls = BertOnlyMLMHead(config)

    def forward(self, op, *inputs):
        return self.cls(op, self.bert(op, *inputs))


class RobertaLMHead(nn.Module):
    def __init__(self, config: ArchitectureConfig, body: str = "roberta"):
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, True)
        self.layer_norm = LayerNorm(config.hidden_size, config.rms_norm_eps)
        self.decoder = _decoder(config, f"{body}.embeddings.word_embeddings.weight",
                                "lm_head.bias")

    def forward(self, op, x):
        x = self.layer_norm(op, apply_activation(op, self.dense(op, x), "gelu"))
        return self.decoder(op, x)


class RobertaForMaskedLM(nn.Module):
    text_inputs = bert.RobertaModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.roberta = bert.RobertaModel(config)
        self.lm_head = RobertaLMHead(config)

    def forward(self, op, *inputs):
        return self.lm_head(op, self.roberta(op, *inputs))


class MPNetForMaskedLM(nn.Module):
    text_inputs = mpnet.MPNetModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.mpnet = mpnet.MPNetModel(config)
        self.lm_head = RobertaLMHead(config, body="mpnet")

    def forward(self, op, *inputs):
        return self.lm_head(op, self.mpnet(op, *inputs))


class DistilBertForMaskedLM(nn.Module):
    text_inputs = distilbert.DistilBertModel.text_inputs

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        self.activation = config.hidden_act
        self.distilbert = distilbert.DistilBertModel(config)
        self.vocab_transform = Linear(config.hidden_size, config.hidden_size, True)
        self.vocab_layer_norm = LayerNorm(config.hidden_size, config.rms_norm_eps)
        self.vocab_projector = _decoder(config, "distilbert.embeddings.word_embeddings.weight")

    def forward(self, op, *inputs):
        x = apply_activation(op, self.vocab_transform(op, self.distilbert(op, *inputs)),
                             self.activation)
        return self.vocab_projector(op, self.vocab_layer_norm(op, x))


def _ignored(decoder: str, head_bias: str | None = None,
             extra: tuple[IgnoredTensors, ...] = ()):
    """Tied: the decoder's own tensors a checkpoint may carry too (copies of what the
    module reads). Untied: the head's bias, which transformers' forward never reads."""
    def ignored(config):
        if config.tie_word_embeddings:
            copies = (IgnoredTensors(rf"{decoder}\.(weight|bias)",
                                     "tied: the word embeddings and the head's bias"),)
        elif head_bias is not None:
            copies = (IgnoredTensors(head_bias, "untied: the decoder's own bias is used"),)
        else:
            copies = ()
        return (*copies, *extra)
    return ignored


def _overrides(base: ModelFamily):
    """The base family's, plus transformers' default tie_word_embeddings=true."""
    return lambda raw: {**base.config_overrides(raw),
                        "tie_word_embeddings": bool(raw.get("tie_word_embeddings", True))}


def _masked_lm(base: ModelFamily, module, architectures, ignored) -> ModelFamily:
    return dataclasses.replace(
        base, name=f"{base.name}-mlm", model_types=(), architectures=architectures,
        module=module, task=fill_mask.TASK, tiny_preset=f"tiny-{base.name}-mlm",
        checkpoint_prefixes=("",), ignored_tensors=ignored, config_overrides=_overrides(base))


_NSP = IgnoredTensors(r"cls\.seq_relationship\..*",
                      "BertForPreTraining's next-sentence head: not part of fill-mask")
FAMILIES = (
    _masked_lm(bert.FAMILY, BertForMaskedLM, ("BertForMaskedLM", "BertForPreTraining"),
               _ignored(r"cls\.predictions\.decoder", r"cls\.predictions\.bias", (_NSP,))),
    _masked_lm(bert.ROBERTA, RobertaForMaskedLM, ("RobertaForMaskedLM",),
               _ignored(r"lm_head\.decoder", r"lm_head\.bias")),
    _masked_lm(bert.XLM_ROBERTA, RobertaForMaskedLM, ("XLMRobertaForMaskedLM",),
               _ignored(r"lm_head\.decoder", r"lm_head\.bias")),
    _masked_lm(distilbert.FAMILY, DistilBertForMaskedLM, ("DistilBertForMaskedLM",),
               _ignored(r"vocab_projector")),
    _masked_lm(mpnet.FAMILY, MPNetForMaskedLM, ("MPNetForMaskedLM",),
               _ignored(r"lm_head\.decoder", r"lm_head\.bias")),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    **masked_lm_head("tiny-bert", bert.TINY_PRESETS["tiny-bert"], "Bert"),
    **masked_lm_head("tiny-roberta", bert.TINY_PRESETS["tiny-roberta"], "Roberta"),
    **masked_lm_head("tiny-xlm-roberta", bert.TINY_PRESETS["tiny-xlm-roberta"], "XLMRoberta"),
    **masked_lm_head("tiny-distilbert", distilbert.TINY_PRESETS["tiny-distilbert"], "DistilBert"),
    **masked_lm_head("tiny-mpnet", mpnet.TINY_PRESETS["tiny-mpnet"], "MPNet"),
}
