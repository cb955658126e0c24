"""Lower: And(a, b) with rank(a) < rank(b) -> And(Unsqueeze(a, leading axes), b), or mirrored.

The attention mask (components/attention_mask.py) combines a [seq, total] causal
grid with [batch, 1, ..., total] terms by numpy broadcasting. onnxruntime-webgpu
1.27's binary elementwise kernels (And, Add, Equal measured) fail on such a pair when the higher-rank input's
extra leading dims are 1 (And [4, 7] with [1, 1, 4, 7]: "Invalid dimension ... for
SizeFromDimension", measured on the real EP; [4, 7] with [3, 4, 7] runs): every
sliding-window decoder's first run. Leading 1s are what broadcasting adds anyway,
so the lowered node computes the same. Needs both ranks known. Only And: the mask's
Or and Xor have no WebGPU kernel (they run on the CPU EP, which broadcasts), and no
package here has hit the failing shapes with another op.
Legal where ``not caps.supports_rank_broadcast``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.rewrite.fusion_util import constant, emit
from mobius.rewrite.rule import NodeRule, RuleContext


class EqualRankBroadcast(NodeRule):
    name = "EqualRankBroadcast"
    stage = "lower"
    order = 70

    def applies(self, ctx: RuleContext) -> bool:
        return not ctx.caps.supports_rank_broadcast

    def match(self, node: ir.Node) -> ir.Node | None:
        if node.op_type != "And" or node.domain != "" or len(node.inputs) != 2:
            return None
        shapes = [None if v is None else v.shape for v in node.inputs]
        if any(s is None for s in shapes) or len(shapes[0]) == len(shapes[1]):
            return None
        return node

    def rewrite(self, model: ir.Model, node: ir.Node, ctx: RuleContext) -> None:
        rank = max(len(v.shape) for v in node.inputs)
        index = min(range(2), key=lambda i: len(node.inputs[i].shape))
        low = node.inputs[index]
        gap = rank - len(low.shape)
        nodes: list[ir.Node] = []
        full = emit(nodes, "Unsqueeze", [low, constant(model.graph, list(range(gap)))])
        full.type, full.shape = low.type, ir.Shape([1] * gap + list(low.shape))
        model.graph.insert_before(node, nodes)
        node.replace_input_with(index, full)
