"""Lower: a decoder's symbolic I/O dims become the EP's static ones.

NPU compilers (the QNN HTP) build one graph per shape: the HTP took 2 integer
subgraphs of a dynamic tiny Llama and the whole graph once every dim was fixed.
A static decoder takes batch 1 and ``static_chunk`` new tokens per call against a
past of ``static_context_length - static_chunk`` slots, so
    batch_size = 1, sequence_length = chunk,
    past_sequence_length = context - chunk, total_sequence_length = context
on every value that carries those names (graph I/O and the inferred shapes inside,
so the fold stage turns the Shape arithmetic into constants). The caller slides its
cache: it keeps the last ``past`` slots of each present, marking empty ones 0 in
attention_mask, and left-pads a short chunk (logits are the last slot's).
Legal for decoders where ``caps.static_context_length``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.rewrite.rule import Rule, RuleContext
from mobius.roles import DECODER
from mobius.tasks.causal_lm import BATCH, PAST, SEQ, TOTAL


def static_dims(context_length: int, chunk: int) -> dict[str, int]:
    """The value of each symbolic decoder dim in a static graph."""
    return {BATCH: 1, SEQ: chunk, PAST: context_length - chunk, TOTAL: context_length}


class StaticShapes(Rule):
    name = "StaticShapes"
    stage = "lower"
    order = 10

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.role == DECODER and ctx.caps.static_context_length > 0

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        dims = static_dims(ctx.caps.static_context_length, ctx.caps.static_chunk)
        graph = model.graph
        values = [*graph.inputs, *graph.outputs,
                  *(out for node in ir.traversal.RecursiveGraphIterator(graph)
                    for out in node.outputs)]
        changed = 0
        for value in dict.fromkeys(values):
            if value.shape is None:
                continue
            fixed = [dims.get(str(d), d) if isinstance(d, ir.SymbolicDim) else d
                     for d in value.shape]
            if fixed != list(value.shape):
                value.shape = ir.Shape(fixed)
                changed += value in graph.inputs or value in graph.outputs
        return changed
