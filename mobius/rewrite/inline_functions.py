"""Inline: expand the function bodies of custom ops the target EP has no kernel for.

Every com.microsoft op mobius emits or fuses carries its standard-op body as a
model-local function. Here, each call whose op the EP lacks is replaced by that
body; the "default" EP keeps the functions instead (portable, runtime decides),
and "onnx-standard" (no contrib ops at all) inlines every one.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import InlinePass, RemoveUnusedNodesPass

from mobius.rewrite.rule import Rule, RuleContext


class InlineUnsupportedFunctions(Rule):
    name = "InlineUnsupportedFunctions"
    stage = "inline"
    order = 10

    def applies(self, ctx: RuleContext) -> bool:
        return not ctx.caps.keep_function_bodies

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        inlined = [node for node in model.graph
                   if node.op_identifier() in model.functions
                   and not ctx.caps.has_kernel(node.op_type)]
        if not inlined:
            return 0
        InlinePass(criteria=lambda function: not ctx.caps.has_kernel(function.name))(model)
        RemoveUnusedNodesPass()(model)  # body nodes feeding absent optional outputs
        return len(inlined)
