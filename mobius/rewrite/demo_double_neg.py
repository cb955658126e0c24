"""Fuse (a demo of docs/adding_a_rule.md, removed by the next commit): Neg(Neg(x)) -> x.

Pattern:
    y = Neg(Neg(x))
Rewrite: y's readers read x. Not when y is a graph output (its name is the contract).
Legality: every EP, dtype and role (an identity in exact arithmetic).
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.rewrite.rule import NodeRule, Rejected, RuleContext, producer


class DoubleNegElimination(NodeRule):
    name = "DoubleNegElimination"
    stage = "fuse"
    order = 135

    def match(self, node: ir.Node) -> tuple[ir.Node, ir.Node] | None:
        if node.op_type != "Neg" or node.domain != "":
            return None
        inner = producer(node.inputs[0], "Neg")
        return None if inner is None else (node, inner)

    def check(self, match: tuple[ir.Node, ir.Node], ctx: RuleContext) -> bool | Rejected:
        if match[0].outputs[0].is_graph_output():
            return Rejected("the double negation is a graph output")
        return True

    def rewrite(self, model: ir.Model, match: tuple[ir.Node, ir.Node], ctx: RuleContext) -> None:
        outer, inner = match
        outer.outputs[0].replace_all_uses_with(inner.inputs[0])
