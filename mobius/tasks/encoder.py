"""feature-extraction with a bidirectional encoder (BERT-style), and sentence embeddings.

Inputs: the module's ``text_inputs`` (input_ids, attention_mask and, where the
family has them, token_type_ids), int64 [batch, seq].
Outputs: last_hidden_state [batch, seq, hidden]; and, when the checkpoint is a
sentence-transformers model (modules.json, 1_Pooling/config.json:
mobius/tasks/sentence_pooling.py), sentence_embedding [batch, hidden * modes],
pooled and optionally L2-normalized as that config says. No KV cache; the
package is for plain onnxruntime (onnxruntime-genai runs generative models only).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.pooling import pool
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.roles import ENCODER
from mobius.tasks.sentence_pooling import read_extras, sentence_pooling
from mobius.tasks.task import (ModelIO, Reference, Task, TaskFlags, TensorSpec, add_inputs,
                               add_outputs, new_graph)

BATCH, SEQ = "batch_size", "sequence_length"
NAMED_DIMS = (BATCH, SEQ)


def text_inputs(module: nn.Module) -> tuple[TensorSpec, ...]:
    """The encoder module's ``text_inputs``, int64 [batch, seq]."""
    return tuple(TensorSpec(n, ir.DataType.INT64, (BATCH, SEQ)) for n in module.text_inputs)


def build_logits(module: nn.Module, io: ModelIO) -> ir.Model:
    """One graph: the module's text inputs -> ``logits`` (the classifier tasks)."""
    dtype = get_build_dtype()
    graph, builder = new_graph()
    inputs = add_inputs(builder, io.inputs, dtype)
    logits = module(builder.op, *(inputs[name] for name in module.text_inputs))
    add_outputs(builder, {"logits": logits}, io.outputs, dtype)
    return ir.Model(graph, ir_version=10, producer_name="mobius")


def encoder_io(module: nn.Module, config: ArchitectureConfig) -> ModelIO:
    hidden = config.hidden_size
    outputs = (TensorSpec("last_hidden_state", None, (BATCH, SEQ, hidden)),)
    pooling = sentence_pooling(config.raw)
    if pooling is not None:
        outputs += (TensorSpec("sentence_embedding", None, (BATCH, hidden * len(pooling.modes))),)
    return ModelIO(inputs=text_inputs(module), outputs=outputs)


def build_encoder(module: nn.Module, config: ArchitectureConfig,
                  flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    io = encoder_io(module, config)
    inputs = add_inputs(builder, io.inputs, dtype)
    hidden = module(builder.op, *(inputs[name] for name in module.text_inputs))
    outputs = {"last_hidden_state": hidden}
    pooling = sentence_pooling(config.raw)
    if pooling is not None:
        outputs["sentence_embedding"] = pool(builder.op, hidden, inputs["attention_mask"],
                                             pooling.modes, pooling.normalize, dtype)
    add_outputs(builder, outputs, io.outputs, dtype)
    return ir.Model(graph, ir_version=10, producer_name="mobius")


TASK = Task(
    name="feature-extraction",
    summary="encoder hidden states, sentence embeddings (onnxruntime)",
    build=lambda module, config, flags: {"model": build_encoder(module, config, flags)},
    roles={"model": ENCODER},
    io=lambda module, config: {"model": encoder_io(module, config)},
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModel", runner="single_pass",
                        inputs=("input_ids", "attention_mask", "token_type_ids"),
                        outputs=("last_hidden_state", "sentence_embedding")),
    read_extras=read_extras,
    sentence_transformers=True,
)
