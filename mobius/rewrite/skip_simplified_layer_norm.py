"""Fuse: Add + RMSNormalization -> com.microsoft SkipSimplifiedLayerNormalization.

Pattern (pre-norm decoders: every residual sum but the embedding feeds a norm):
    h = Add(input, skip)                         # [B,S,H] (or [N,H])
    y = RMSNormalization(h, gamma, axis=-1, epsilon=e, stash_type=s)
Rewrite:
    y, _, _, h' = SkipSimplifiedLayerNormalization(input, skip, gamma, epsilon=e)
Every other use of ``h`` -- the next residual Add, across the layer boundary,
another norm, a graph output -- reads ``h'`` (input_skip_bias_sum) instead.
For L pre-norm
layers plus a final norm this fuses 2L of the 2L+1 norms (the first layer's
input norm reads the embeddings, not an Add).

Legal where the EP declares skip-norm kernels (``supports_skip_layer_norm``)
and lists this one (``has_kernel``), for every role (norm placement is the
same in decoders, encoders and vision towers), for f32/f16/bf16 tensors.
Checks: the norm is over the last axis only; gamma is 1-D of the hidden size
and of the tensor dtype; the Add's operands have the shapes the kernel takes
(same shape, or a [1,S,H] / [S,H] skip); ``stash_type`` is 1 (f32
accumulation, what the kernels do) unless the tensors are f32 already.
``epsilon`` and ``stash_type`` are carried into the fused op and its body.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.contrib.skip_simplified_layer_norm import (
    OP_TYPE,
    SkipSimplifiedSpec,
    make_skip_simplified_node,
)
from mobius.rewrite.fusion_util import derived_name
from mobius.rewrite.residual_add import (
    SKIP_NORM_DTYPES,
    is_last_axis,
    replace_norm,
    split_residual_add,
    vector_of,
)
from mobius.rewrite.rule import NodeRule, Rejected, RuleContext, attr

#: RMSNormalization's defaults (opset 23).
DEFAULT_EPSILON = 1e-5
DEFAULT_STASH_TYPE = 1


@dataclasses.dataclass
class _Match:
    add: ir.Node
    norm: ir.Node
    input: ir.Value
    skip: ir.Value
    gamma: ir.Value


class SkipSimplifiedLayerNormFusion(NodeRule):
    name = "SkipSimplifiedLayerNormFusion"
    stage = "fuse"
    order = 40

    def applies(self, ctx: RuleContext) -> bool:
        return (ctx.caps.supports_skip_layer_norm and ctx.caps.has_kernel(OP_TYPE)
                and ctx.dtype in SKIP_NORM_DTYPES)

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "RMSNormalization" or node.domain not in ("", "ai.onnx"):
            return None
        if len(node.inputs) != 2 or node.inputs[1] is None:
            return None
        found = split_residual_add(node.inputs[0])
        if found is None:
            return None
        add, inp, skip = found
        return _Match(add, node, inp, skip, node.inputs[1])

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        shape = match.input.shape
        if not is_last_axis(attr(match.norm, "axis", -1), len(shape)):
            return Rejected("the norm is not over the last axis")
        dtype = match.input.dtype
        if not vector_of(match.gamma, shape[-1], dtype):
            return Rejected("the scale is not a vector of the hidden size in the input dtype")
        stash = attr(match.norm, "stash_type", DEFAULT_STASH_TYPE)
        if stash != 1 and dtype != ir.DataType.FLOAT:
            return Rejected(f"stash_type {stash} on {dtype}: the fused op keeps float32 statistics")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        spec = SkipSimplifiedSpec(float(attr(match.norm, "epsilon", DEFAULT_EPSILON)),
                                  int(attr(match.norm, "stash_type", DEFAULT_STASH_TYPE)))
        fused = make_skip_simplified_node(
            model, spec, [match.input, match.skip, match.gamma],
            name=derived_name(match.norm, "SkipSimplifiedLayerNormalization"))
        replace_norm(model.graph, match.add, match.norm, fused)
