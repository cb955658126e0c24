"""Lower: a projection on a transposed checkpoint weight -> FusedMatMul reading it as stored.

    MatMul(x, W)  ->  FusedMatMul(x, W_ckpt, transB=1)

A Linear's MatMul weight W [in, out] is the checkpoint's [out, in] tensor
transposed when the package is saved: at real sizes the transpose, and the
page-cache pages it fills through a fresh mapping, were most of a float32
build's CPU (docs/benchmarks.md as of fedc923). Where the EP repacks every constant 2-D
MatMul weight into its own layout when the session loads
(``caps.prepacks_2d_weights``), the stored layout costs nothing at run time:
onnxruntime's CPU kernel packs B [N, K] read with transB=1 into the same
buffer as B^T [K, N] (logits equal bit for bit; decode at the peer's speed:
docs/benchmarks.md, "f32 decode, paired"). The weight is then saved as the checkpoint stores it,
copied file to file where its bytes are the checkpoint's.

Matched: a default-domain MatMul whose B is a float32 2-D initializer read by
nothing else, whose values are known in the checkpoint's layout: a checkpoint
tensor read transposed (``CheckpointTensor.checkpoint_layout``), or QKV
packed from such parts along the output axis (PackQKV's ``concat_loader``),
saved as the parts' rows one after another. Anything else (LoRA-merged or
computed weights, sliced fused projections, shared weights) stays a MatMul.
Legality: a FusedMatMul kernel, prepacked 2-D weights, float32 builds (the
kernel's type).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.ep.contrib_ops import FUSED_MATMUL
from mobius.rewrite.fusion_util import derived_name, take_over
from mobius.rewrite.pack_qkv import CONCAT_OF
from mobius.rewrite.rule import NodeRule, Rejected, RuleContext
from mobius.weights.checkpoint_tensor import CheckpointTensor
from mobius.weights.mapped_write import write_tensor

MS_DOMAIN = "com.microsoft"


@dataclasses.dataclass
class _Match:
    matmul: ir.Node
    weight: ir.Value
    stored: ir.TensorProtocol  # the weight's values as [out, in]


class CheckpointLayoutMatMul(NodeRule):
    name = "CheckpointLayoutMatMul"
    stage = "fuse"
    order = 130

    def applies(self, ctx: RuleContext) -> bool:
        return (ctx.caps.has_kernel(FUSED_MATMUL) and ctx.caps.prepacks_2d_weights
                and ctx.dtype == ir.DataType.FLOAT)

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2:
            return None
        weight = node.inputs[1]
        if (weight is None or not weight.is_initializer() or weight.is_graph_input()
                or weight.const_value is None or len(weight.uses()) != 1):
            return None
        tensor = weight.const_value
        if tensor.dtype != ir.DataType.FLOAT or len(tensor.shape) != 2:
            return None
        stored = checkpoint_layout(tensor)
        return None if stored is None else _Match(node, weight, stored)

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        rows, cols = match.weight.const_value.shape
        if tuple(match.stored.shape) != (cols, rows):
            return Rejected(f"stored shape {tuple(match.stored.shape)} is not the weight's "
                            f"{(rows, cols)} transposed")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        fused = ir.Node(MS_DOMAIN, FUSED_MATMUL, list(match.matmul.inputs),
                        attributes=[ir.AttrInt64("transB", 1)],
                        name=derived_name(match.matmul, FUSED_MATMUL))
        model.graph.insert_before(match.matmul, fused)
        take_over(match.matmul.outputs[0], fused.outputs[0])
        match.weight.const_value = match.stored
        match.weight.shape = ir.Shape(match.stored.shape)
        model.opset_imports.setdefault(MS_DOMAIN, 1)


def checkpoint_layout(tensor: ir.TensorProtocol) -> ir.TensorProtocol | None:
    """``tensor``'s transpose, as values that need no transposing; None if not known."""
    if isinstance(tensor, CheckpointTensor):
        return tensor.checkpoint_layout() if tensor.checkpoint_layout else None
    concat = getattr(tensor, "meta", {}).get(CONCAT_OF)
    if concat is None or concat.axis != 1:
        return None
    parts = [checkpoint_layout(part) for part in concat.parts]
    if any(part is None for part in parts):
        return None
    return StackedRows(parts, name=tensor.name)


class StackedRows(ir.LazyTensor):
    """Tensors of one width stacked along axis 0; ``tofile`` saves each part in turn, so
    every part keeps its own way of being written (a file-to-file copy)."""

    def __init__(self, parts: list[ir.TensorProtocol], name: str | None = None):
        rows = sum(part.shape[0] for part in parts)
        shape = ir.Shape([rows, *parts[0].shape[1:]])
        super().__init__(self._stack, parts[0].dtype, shape, name=name)
        self.parts = parts

    def _stack(self) -> ir.Tensor:
        return ir.Tensor(np.concatenate([part.numpy() for part in self.parts]), dtype=self.dtype,
                         name=self.name)

    def tofile(self, file) -> None:
        for part in self.parts:
            write_tensor(part, file)
