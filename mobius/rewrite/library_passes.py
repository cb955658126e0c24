"""Generic cleanups borrowed from onnx_ir / onnxscript, wrapped as pipeline rules.

They are EP-independent, so each is legal everywhere. Constant folding never
materializes large initializers (the weights stay lazy until saving).
"""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common as common_passes
from onnxscript import optimizer

from mobius.rewrite.rule import Rule, RuleContext

_FOLD_INPUT_LIMIT = 8192  # elements; larger constants (weights, RoPE tables) are never read
#: ``node.meta`` key of a node that views an initializer other nodes read too
#: (e.g. the tied embedding's scales reshaped for GatherBlockQuantized): folding
#: it would store the same tensor twice
NO_FOLD = "mobius.no_fold"


class _PassRule(Rule):
    def make_pass(self) -> ir.passes.PassBase:
        raise NotImplementedError

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        before = model.graph.num_nodes()
        result = self.make_pass()(model)
        return abs(before - model.graph.num_nodes()) if result.modified else 0


class IdentityElimination(_PassRule):
    name = "IdentityElimination"

    def make_pass(self):
        return common_passes.IdentityEliminationPass()


class CommonSubexpressionElimination(_PassRule):
    name = "CommonSubexpressionElimination"

    def make_pass(self):
        return common_passes.CommonSubexpressionEliminationPass()


class RemoveUnused(_PassRule):
    name = "RemoveUnused"

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        before = model.graph.num_nodes() + len(model.graph.initializers)
        common_passes.RemoveUnusedNodesPass()(model)
        common_passes.RemoveUnusedFunctionsPass()(model)
        common_passes.RemoveUnusedOpsetsPass()(model)
        return before - model.graph.num_nodes() - len(model.graph.initializers)


class DeduplicateInitializers(Rule):
    """Merges identical small in-memory constants; lazy weights are never read to compare them."""

    name = "DeduplicateInitializers"

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        removed = 0
        for graph in model.graphs():
            seen: dict[tuple, ir.Value] = {}
            for value in tuple(graph.initializers.values()):
                tensor = value.const_value
                if (not isinstance(tensor, ir.Tensor) or tensor.size > _FOLD_INPUT_LIMIT
                        or value.is_graph_input() or value.is_graph_output()):
                    continue  # LazyTensor / external data: reading it would load a weight
                key = (tensor.dtype, tuple(tensor.shape), tensor.tobytes())
                if key in seen:
                    value.replace_all_uses_with(seen[key])
                    graph.initializers.pop(value.name)
                    removed += 1
                else:
                    seen[key] = value
        return removed


class ConstantFolding(Rule):
    name = "ConstantFolding"

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        before = model.graph.num_nodes()
        optimizer.fold_constants(model, onnx_shape_inference=False,
                                 input_size_limit=_FOLD_INPUT_LIMIT,
                                 output_size_limit=_FOLD_INPUT_LIMIT,
                                 should_fold=lambda node: False if node.meta.get(NO_FOLD) else None)
        common_passes.RemoveUnusedNodesPass()(model)
        return max(0, before - model.graph.num_nodes())
