"""Fuse: Add + LayerNormalization -> com.microsoft SkipLayerNormalization.

Pattern:
    h = Add(input, skip)                          # [B,S,H] (or [N,H])
    y = LayerNormalization(h, gamma[, beta], axis=-1, epsilon=e, stash_type=s)
Rewrite:
    y, _, _, h' = SkipLayerNormalization(input, skip, gamma[, beta], epsilon=e)
Every other use of ``h`` (the next residual Add across a layer boundary, a
graph output ...) reads ``h'`` (input_skip_bias_sum).

Legal where the EP declares skip-norm kernels (``supports_skip_layer_norm``)
and lists this one (``has_kernel``), for every role, for f32/f16/bf16 tensors.
Checks: normalization over the last axis only; gamma (and beta, if present)
1-D of the hidden size and the tensor dtype; the norm's Mean / InvStdDev
outputs unused; Add operand shapes the kernel takes; ``stash_type`` 1 (what
the kernels do) unless the tensors are f32 already. ``epsilon`` and
``stash_type`` are carried into the fused op and its body.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.contrib.skip_layer_norm import (
    OP_TYPE,
    SkipLayerNormSpec,
    make_skip_layer_norm_node,
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

#: LayerNormalization's defaults (opset 17+).
DEFAULT_EPSILON = 1e-5
DEFAULT_STASH_TYPE = 1


@dataclasses.dataclass
class _Match:
    add: ir.Node
    norm: ir.Node
    input: ir.Value
    skip: ir.Value
    gamma: ir.Value
    beta: ir.Value | None


class SkipLayerNormFusion(NodeRule):
    name = "SkipLayerNormFusion"
    stage = "fuse"
    order = 50

    def applies(self, ctx: RuleContext) -> bool:
        return (ctx.caps.supports_skip_layer_norm and ctx.caps.has_kernel(OP_TYPE)
                and ctx.dtype in SKIP_NORM_DTYPES)

    def match(self, node: ir.Node) -> _Match | None:
        if node.op_type != "LayerNormalization" or node.domain not in ("", "ai.onnx"):
            return None
        if len(node.inputs) not in (2, 3) or node.inputs[1] is None:
            return None
        found = split_residual_add(node.inputs[0])
        if found is None:
            return None
        add, inp, skip = found
        beta = node.inputs[2] if len(node.inputs) == 3 else None
        return _Match(add, node, inp, skip, node.inputs[1], beta)

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        shape = match.input.shape
        if not is_last_axis(attr(match.norm, "axis", -1), len(shape)):
            return Rejected("the norm is not over the last axis")
        if any(o.uses() or o.is_graph_output() for o in match.norm.outputs[1:]):
            return Rejected("the norm's mean / inverse-std outputs are read")
        dtype = match.input.dtype
        hidden = shape[-1]
        if not vector_of(match.gamma, hidden, dtype):
            return Rejected("the scale is not a vector of the hidden size in the input dtype")
        if match.beta is not None and not vector_of(match.beta, hidden, dtype):
            return Rejected("the bias is not a vector of the hidden size in the input dtype")
        stash = attr(match.norm, "stash_type", DEFAULT_STASH_TYPE)
        if stash != 1 and dtype != ir.DataType.FLOAT:
            return Rejected(f"stash_type {stash} on {dtype}: the fused op keeps float32 statistics")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        spec = SkipLayerNormSpec(float(attr(match.norm, "epsilon", DEFAULT_EPSILON)),
                                 int(attr(match.norm, "stash_type", DEFAULT_STASH_TYPE)))
        fused = make_skip_layer_norm_node(
            model, spec, [match.input, match.skip, match.gamma, match.beta],
            name=derived_name(match.norm, "SkipLayerNormalization"))
        replace_norm(model.graph, match.add, match.norm, fused)
