"""Generic cleanups borrowed from onnx_ir / onnxscript, wrapped as pipeline rules.

They are EP-independent, so each is legal everywhere. Constant folding never
materializes large initializers (the weights stay lazy until saving).
"""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common as common_passes
from onnxscript import optimizer

from mobius.rewrite.rule import Rule, RuleContext

FOLD_INPUT_LIMIT = 8192  # elements; larger constants (weights, RoPE tables) are never read
#: ``node.meta`` key of a node that views an initializer other nodes read too
#: (e.g. the tied embedding's scales reshaped for GatherBlockQuantized): folding
#: it would store the same tensor twice
NO_FOLD = "mobius.no_fold"
#: the domains whose nodes RemoveUnusedNodesPass trims by their schema (as it spells them)
_ONNX_DOMAINS = ("", "onnx.ai")


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


def _has_dead_code(graph: ir.Graph | ir.Function) -> bool:
    """Whether RemoveUnusedNodesPass could change ``graph`` (or a subgraph in it).

    Conservative: true for any node the pass might touch, so skipping it on false
    changes nothing. The pass removes a node no output of which is used (or one
    without outputs) and trims trailing absent inputs; on an ONNX-domain node it
    also trims unused optional outputs (reading the schema) and may drop a
    BatchNormalization's training_mode.
    """
    outputs = frozenset(graph.outputs)
    for node in graph:
        unused = [out not in outputs and not out.uses() for out in node.outputs]
        if all(unused) or (node.inputs and node.inputs[-1] is None):
            return True
        if node.domain in _ONNX_DOMAINS and (
                any(unused) or not all(out.name for out in node.outputs)
                or node.op_type == "BatchNormalization"):
            return True
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH and _has_dead_code(attr.value):
                return True
            if attr.type == ir.AttributeType.GRAPHS and any(map(_has_dead_code, attr.value)):
                return True
    return False


def _may_remove(model: ir.Model) -> bool:
    """Whether RemoveUnusedNodesPass could change ``model``: its graph, a function
    body, or an initializer that nothing reads and that is no graph input or output."""
    graph = model.graph
    keep = frozenset(graph.inputs) | frozenset(graph.outputs)
    return (_has_dead_code(graph) or any(map(_has_dead_code, model.functions.values()))
            or any(not v.uses() and v not in keep for v in graph.initializers.values()))


def remove_unused_nodes(model: ir.Model) -> None:
    """onnx_ir's RemoveUnusedNodesPass, skipped where it would find nothing to do.

    The pass asks ONNX for the schema of every node it keeps (to trim optional
    outputs), ~10% of a tiny build's CPU under cProfile; the pipeline runs it four
    times and about three runs in four find a clean graph, which this cheaper walk
    (a third of the pass's time) recognizes.
    """
    if _may_remove(model):
        common_passes.RemoveUnusedNodesPass()(model)


class RemoveUnused(_PassRule):
    name = "RemoveUnused"

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        before = model.graph.num_nodes() + len(model.graph.initializers)
        remove_unused_nodes(model)
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
                if (not isinstance(tensor, ir.Tensor) or tensor.size > FOLD_INPUT_LIMIT
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
                                 input_size_limit=FOLD_INPUT_LIMIT,
                                 output_size_limit=FOLD_INPUT_LIMIT,
                                 should_fold=lambda node: False if node.meta.get(NO_FOLD) else None)
        remove_unused_nodes(model)
        return max(0, before - model.graph.num_nodes())
