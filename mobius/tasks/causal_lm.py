"""Causal LM with a dynamic KV cache, named as onnxruntime-genai expects.

Inputs: input_ids [batch, seq], attention_mask [batch, total_seq],
position_ids [batch, seq], past_key_values.{i}.key/.value
[batch, kv_heads, past_seq, head_dim]. Outputs: logits [batch, seq, vocab],
present.{i}.key/.value [batch, kv_heads, total_seq, head_dim].
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir
from onnxscript import nn
from onnxscript._internal.builder import GraphBuilder

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.tasks.concrete_dims import check_io_dims

OPSET = 23
BATCH, SEQ, TOTAL, PAST = "batch_size", "sequence_length", "total_sequence_length", "past_sequence_length"
#: The only symbolic dims of the decoder's graph I/O (see TaskFlags.use_concrete_dims).
NAMED_DIMS = (BATCH, SEQ, TOTAL, PAST)


@dataclasses.dataclass(frozen=True)
class TaskFlags:
    """Structural build-time switches a task may receive (never an EP name).

    use_concrete_dims: for runtimes that plan memory ahead (WebGPU). Guarantees
        (mobius/tasks/concrete_dims.py, checked on the finished package):
        (1) graph I/O: every dim fixed by the config (kv heads, head_dim,
        vocab) is an int and every other dim is one of NAMED_DIMS -- no
        anonymous/unknown dims, one name = one run-time size, so a runtime
        can pin them by name; the task raises if its I/O breaks this.
        (2) value_info: after the pipeline, every main-graph value has a dtype
        and a known-rank shape (ints where inferable, input names where
        inference ties them; only data-dependent lengths stay unknown).

    There is deliberately no int32-I/O flag: int64 -> int32 graph I/O is the
    lowering rule mobius/rewrite/int32_io.py (everything it needs is in the
    finished graph; see that module), so the task always declares the
    contract's int64 inputs.
    """

    use_concrete_dims: bool = False
    #: The decoder of a multi-model package (vision-language): its first input is
    #: ``inputs_embeds`` [batch, seq, hidden] (made by the package's embedding
    #: model) instead of ``input_ids``; the rest of the contract is unchanged.
    inputs_embeds: bool = False


def build_causal_lm(module: nn.Module, config: ArchitectureConfig,
                    flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name="main_graph")
    builder = GraphBuilder(graph)
    op = builder.op
    if flags.inputs_embeds:
        input_ids = None
        embeds = {"inputs_embeds": builder.input("inputs_embeds", dtype,
                                                 [BATCH, SEQ, config.hidden_size])}
    else:
        input_ids = builder.input("input_ids", ir.DataType.INT64, [BATCH, SEQ])
        embeds = {}
    attention_mask = builder.input("attention_mask", ir.DataType.INT64, [BATCH, TOTAL])
    position_ids = builder.input("position_ids", ir.DataType.INT64, [BATCH, SEQ])
    kv_shape = [BATCH, config.num_key_value_heads, PAST, config.head_dim]
    past = [
        (builder.input(f"past_key_values.{i}.key", dtype, kv_shape),
         builder.input(f"past_key_values.{i}.value", dtype, kv_shape))
        for i in range(config.num_hidden_layers)
    ]
    logits, presents = module(op, input_ids, attention_mask, position_ids, past, **embeds)

    output_value(builder, logits, "logits", dtype, [BATCH, SEQ, config.vocab_size])
    present_shape = [BATCH, config.num_key_value_heads, TOTAL, config.head_dim]
    for i, (key, value) in enumerate(presents):
        output_value(builder, key, f"present.{i}.key", dtype, present_shape)
        output_value(builder, value, f"present.{i}.value", dtype, present_shape)
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    if flags.use_concrete_dims:
        check_io_dims(model, NAMED_DIMS)
    return model


def output_value(builder: GraphBuilder, value: ir.Value, name: str, dtype: ir.DataType, shape):
    if value.producer() is None or value.name in {v.name for v in builder.graph.outputs}:
        value = builder.op.Identity(value)
    builder.add_output(value, name)
    value.type = ir.TensorType(dtype)
    value.shape = ir.Shape(shape)
