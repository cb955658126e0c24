"""text-classification (sentiment, NLI, cross-encoder rerankers): an encoder with a
sequence-classification head.

Inputs: the module's ``text_inputs``, int64 [batch, seq]. Output: logits
[batch, num_labels] (a reranker's single relevance score: num_labels 1). The
labels (config.json ``id2label``) go into every model's metadata as JSON under
``id2label``. The package is for plain onnxruntime.
"""

from __future__ import annotations

from mobius.roles import ENCODER
from mobius.tasks.encoder import BATCH, NAMED_DIMS, build_logits, text_inputs
from mobius.tasks.labels import id2label, label_metadata
from mobius.tasks.task import ModelIO, Reference, Task, TensorSpec


def classification_io(module, config) -> ModelIO:
    return ModelIO(inputs=text_inputs(module),
                   outputs=(TensorSpec("logits", None, (BATCH, len(id2label(config.raw)))),))


TASK = Task(
    name="text-classification",
    summary="sequence classifier / reranker logits, id2label metadata (onnxruntime)",
    build=lambda module, config, flags: {
        "model": build_logits(module, classification_io(module, config))},
    roles={"model": ENCODER},
    io=lambda module, config: {"model": classification_io(module, config)},
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForSequenceClassification", runner="single_pass",
                        inputs=("input_ids", "attention_mask", "token_type_ids"),
                        outputs=("logits",)),
    metadata=lambda config: label_metadata(config.raw),
    sentence_transformers=True,
)
