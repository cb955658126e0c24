"""Fuse: the LM head's Reshape -> Gemm(transB=1) -> Reshape -> one com.microsoft FusedMatMul.

    Reshape(Gemm(Reshape(x, [-1, H]), W, transB=1), shape)  ->  FusedMatMul(x, W, transB=1)

FusedMatMul reads W [vocab, hidden] as stored and writes the [..., vocab]
logits directly; the Reshape after a Gemm copies them (one more logits
buffer, 64 MiB for 512 tokens of a 32000-token vocabulary).

ONNX Runtime's CPU EP repacks the constant 2-D B of every MatMul and Gemm
into a private buffer when the session loads. Where ``caps.prepacks_2d_weights``
the head's matrix is stored as [1, vocab, hidden] (a 3-D B is read in place
from the memory-mapped data file; MLAS only packs 2-D weights):

- tied: the embedding's Gather also reads the matrix, so a packed copy would
  be a second resident one. Each ``Gather(W, ids, axis=0)`` becomes
  ``Squeeze(Gather(W3, ids, axis=1), [0])``: one copy on disk and in memory.
- untied: packing pages the whole original in beside its packed copy, twice
  the head at the load's peak (4 GB for a 128256 x 4096 float32 head); unpacked,
  its pages are read when the logits are first computed, once.

The price: MLAS packs an unpacked B on every call of two or more rows
(batched decode, every-position logits: 1.3-1.6x the head's time), while one
row (batch-1 decode, genai's last-position prefill) is faster
(docs/benchmarks.md).

``W`` is an initializer read only by that Gemm (as B, without a bias) and by
Gathers along axis 0. Legality: a FusedMatMul kernel, for builds computed in
float32 (the kernel's type).
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.ep.contrib_ops import FUSED_MATMUL
from mobius.rewrite.fusion_util import constant, derived_name, emit, take_over
from mobius.rewrite.rule import NodeRule, Rejected, RuleContext, attr, producer, sole_consumer
from mobius.weights.mapped_write import write_tensor

MS_DOMAIN = "com.microsoft"


@dataclasses.dataclass
class _Match:
    gemm: ir.Node
    out: ir.Node  # the Reshape back to [..., vocab]
    x: ir.Value  # the head's input, before the Reshape to 2-D
    weight: ir.Value
    gathers: list[ir.Node]


class HeadFusedMatMul(NodeRule):
    name = "HeadFusedMatMul"
    stage = "fuse"
    order = 120

    def applies(self, ctx: RuleContext) -> bool:
        computes_f32 = ctx.dtype == ir.DataType.FLOAT or not ctx.caps.computes(ctx.dtype)
        return ctx.caps.has_kernel(FUSED_MATMUL) and computes_f32

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "Gemm" or node.domain != "" or len(node.inputs) != 2:
            return None
        if attr(node, "transB", 0) != 1 or attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1:
            return None
        rows, weight = node.inputs
        flatten = producer(rows, "Reshape")
        out = sole_consumer(node.outputs[0])
        if flatten is None or out is None or out.op_type != "Reshape" or out.domain != "":
            return None
        if weight is None or not weight.is_initializer() or weight.const_value is None:
            return None
        gathers = [use.node for use in weight.uses() if use.node is not node]
        if not all(_row_gather(g, weight) for g in gathers):
            return None
        return _Match(node, out, flatten.inputs[0], weight, gathers)

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        shape = match.weight.shape
        if shape is None or len(shape) != 2:
            return Rejected(f"head weight shape {shape} is not 2-D")
        if match.x.shape is None:
            return Rejected("the head's input has no known shape")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        fused = ir.Node(MS_DOMAIN, FUSED_MATMUL, [match.x, match.weight],
                        attributes=[ir.AttrInt64("transB", 1)],
                        name=derived_name(match.gemm, FUSED_MATMUL))
        model.graph.insert_before(match.out, fused)
        take_over(match.out.outputs[0], fused.outputs[0])
        model.opset_imports.setdefault(MS_DOMAIN, 1)
        if not ctx.caps.prepacks_2d_weights:
            return
        # After the head: a Gather may produce its input x, which take_over rewires.
        _add_leading_axis(match.weight)
        axis0 = constant(model.graph, [0])
        for gather in match.gathers:
            nodes: list[ir.Node] = []
            rows = emit(nodes, "Gather", [match.weight, gather.inputs[1]], axis=1)
            squeezed = emit(nodes, "Squeeze", [rows, axis0])
            model.graph.insert_before(gather, nodes)
            take_over(gather.outputs[0], squeezed)


def _row_gather(node: ir.Node, weight: ir.Value) -> bool:
    """A Gather of whole rows of ``weight`` (axis 0, weight as its data input)."""
    return (node.op_type == "Gather" and node.domain == "" and node.inputs[0] is weight
            and node.inputs[1] is not weight and attr(node, "axis", 0) == 0)


def _add_leading_axis(weight: ir.Value) -> None:
    """[V, H] -> [1, V, H] in place: same bytes, read when the model is saved."""
    shape = ir.Shape([1, *weight.const_value.shape])
    weight.const_value = _Reshaped(weight.const_value, shape)
    weight.shape = shape


class _Reshaped(ir.LazyTensor):
    """``tensor`` under another shape; its own ``tofile`` writes the (same) bytes,
    so a checkpoint tensor keeps its file-to-file copy."""

    def __init__(self, tensor: ir.TensorProtocol, shape: ir.Shape):
        super().__init__(lambda: ir.Tensor(tensor.numpy().reshape(shape.numpy()),
                                           name=tensor.name),
                         tensor.dtype, shape, name=tensor.name)
        self.tensor = tensor

    def tofile(self, file) -> None:
        write_tensor(self.tensor, file)
