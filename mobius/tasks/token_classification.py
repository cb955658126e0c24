"""token-classification (NER, POS tagging): an encoder with a per-token classifier.

Inputs: the module's ``text_inputs``, int64 [batch, seq]. Output: logits
[batch, seq, num_labels]; the labels (config.json ``id2label``) go into every
model's metadata as JSON under ``id2label``. The package is for plain onnxruntime.
"""

from __future__ import annotations

from mobius.roles import ENCODER
from mobius.tasks.encoder import BATCH, NAMED_DIMS, SEQ, build_logits, text_inputs
from mobius.tasks.labels import id2label, label_metadata
from mobius.tasks.task import ModelIO, Reference, Task, TensorSpec


def token_classification_io(module, config) -> ModelIO:
    return ModelIO(inputs=text_inputs(module),
                   outputs=(TensorSpec("logits", None, (BATCH, SEQ, len(id2label(config.raw)))),))


TASK = Task(
    name="token-classification",
    summary="per-token classifier logits, id2label metadata (onnxruntime)",
    build=lambda module, config, flags: {
        "model": build_logits(module, token_classification_io(module, config))},
    roles={"model": ENCODER},
    io=lambda module, config: {"model": token_classification_io(module, config)},
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForTokenClassification", runner="single_pass",
                        inputs=("input_ids", "attention_mask", "token_type_ids"),
                        outputs=("logits",)),
    metadata=lambda config: label_metadata(config.raw),
)
