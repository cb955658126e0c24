"""fill-mask: an encoder with its masked-language-model head.

Inputs: the module's ``text_inputs``, int64 [batch, seq]. Output: logits
[batch, seq, vocab]. The package is for plain onnxruntime.
"""

from __future__ import annotations

from mobius.roles import ENCODER
from mobius.tasks.encoder import BATCH, NAMED_DIMS, SEQ, build_logits, text_inputs
from mobius.tasks.task import ModelIO, Reference, Task, TensorSpec


def fill_mask_io(module, config) -> ModelIO:
    return ModelIO(inputs=text_inputs(module),
                   outputs=(TensorSpec("logits", None, (BATCH, SEQ, config.vocab_size)),))


TASK = Task(
    name="fill-mask",
    summary="masked-LM logits over the vocabulary (onnxruntime)",
    build=lambda module, config, flags: {"model": build_logits(module, fill_mask_io(module, config))},
    roles={"model": ENCODER},
    io=lambda module, config: {"model": fill_mask_io(module, config)},
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForMaskedLM", runner="single_pass",
                        inputs=("input_ids", "attention_mask", "token_type_ids"),
                        outputs=("logits",)),
)
