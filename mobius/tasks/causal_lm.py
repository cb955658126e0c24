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

OPSET = 23
BATCH, SEQ, TOTAL, PAST = "batch_size", "sequence_length", "total_sequence_length", "past_sequence_length"


@dataclasses.dataclass(frozen=True)
class TaskFlags:
    """Structural build-time switches a task may receive (never an EP name).

    use_concrete_dims: give every symbolic dimension an inferred name/size
        where one is known, so runtimes without dynamic-shape support can
        plan memory (the model's own dims are always concrete).
    int32_inputs: declare integer graph inputs as int32 instead of int64.
    """

    use_concrete_dims: bool = False
    int32_inputs: bool = False


def build_causal_lm(module: nn.Module, config: ArchitectureConfig,
                    flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name="main_graph")
    builder = GraphBuilder(graph)
    op = builder.op
    index_dtype = ir.DataType.INT32 if flags.int32_inputs else ir.DataType.INT64

    def index_input(name, shape):
        value = builder.input(name, index_dtype, shape)
        return op.Cast(value, to=ir.DataType.INT64) if flags.int32_inputs else value

    input_ids = index_input("input_ids", [BATCH, SEQ])
    attention_mask = index_input("attention_mask", [BATCH, TOTAL])
    position_ids = index_input("position_ids", [BATCH, SEQ])
    kv_shape = [BATCH, config.num_key_value_heads, PAST, config.head_dim]
    past = [
        (builder.input(f"past_key_values.{i}.key", dtype, kv_shape),
         builder.input(f"past_key_values.{i}.value", dtype, kv_shape))
        for i in range(config.num_hidden_layers)
    ]
    logits, presents = module(op, input_ids, attention_mask, position_ids, past)

    _output(builder, logits, "logits", dtype, [BATCH, SEQ, config.vocab_size])
    present_shape = [BATCH, config.num_key_value_heads, TOTAL, config.head_dim]
    for i, (key, value) in enumerate(presents):
        _output(builder, key, f"present.{i}.key", dtype, present_shape)
        _output(builder, value, f"present.{i}.value", dtype, present_shape)
    return ir.Model(graph, ir_version=10, producer_name="mobius")


def _output(builder: GraphBuilder, value: ir.Value, name: str, dtype: ir.DataType, shape):
    if value.producer() is None or value.name in {v.name for v in builder.graph.outputs}:
        value = builder.op.Identity(value)
    builder.add_output(value, name)
    value.type = ir.TensorType(dtype)
    value.shape = ir.Shape(shape)
