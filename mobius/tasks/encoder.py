"""Feature extraction with a bidirectional encoder (BERT-style).

Inputs: input_ids, attention_mask and token_type_ids, int64 [batch, seq].
Output: last_hidden_state [batch, seq, hidden]. No KV cache.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn
from onnxscript._internal.builder import GraphBuilder

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.tasks.causal_lm import OPSET, TaskFlags, output_value

BATCH, SEQ = "batch_size", "sequence_length"


def build_encoder(module: nn.Module, config: ArchitectureConfig,
                  flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name="main_graph")
    builder = GraphBuilder(graph)
    op = builder.op
    input_ids, attention_mask, token_type_ids = (
        builder.input(name, ir.DataType.INT64, [BATCH, SEQ])
        for name in ("input_ids", "attention_mask", "token_type_ids"))
    hidden = module(op, input_ids, attention_mask, token_type_ids)
    output_value(builder, hidden, "last_hidden_state", dtype, [BATCH, SEQ, config.hidden_size])
    return ir.Model(graph, ir_version=10, producer_name="mobius")
