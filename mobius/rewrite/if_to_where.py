"""Lower: ``If`` -> both branches inline + ``Where``, for EPs without If (``caps.supports_if=False``).

    y_1..y_n = If(cond) then {T} else {E}
becomes
    <nodes of T> ; <nodes of E>                     (both computed, outer values captured as-is)
    y_k = Where(Reshape(cond, []), t_k, e_k)        (per output; cond broadcast as a scalar)

Legal only when the result is the same for either condition, which needs:

* every output pair is a tensor of one dtype with the *same, fully known*
  shape (equal ints / equal named dims): If may return differently shaped
  values per branch, Where would broadcast them into one shape instead;
* no control flow left in either branch (nested Ifs are lowered first,
  bottom-up; a Loop/Scan, or an If that could not be lowered, blocks it);
* no nondeterministic op (Random*, Multinomial, Bernoulli): evaluating the
  untaken branch must be unobservable.

Evaluating the untaken branch must also be *legal*: a branch that only runs
when a guard holds (say ``Gather(x, 0)`` under ``size > 0``) could fail when
evaluated eagerly. That cannot be decided from the graph in general; the rule
assumes branches are total, which is true of everything mobius emits (RoPE
table selection, scaling choices).

An If that cannot be lowered stays, with a warning giving the reason; on such
an EP the model will not load, which a later check reports.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import onnx_ir as ir

from mobius.rewrite.rule import Rule, RuleContext

_NONDETERMINISTIC = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli",
})


class IfToWhere(Rule):
    name = "IfToWhere"
    stage = "lower"
    order = 80

    def applies(self, ctx: RuleContext) -> bool:
        return not ctx.caps.supports_if

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        if model.opset_imports.get("", 0) < 9:  # Where appeared in opset 9
            return 0
        names = itertools.count()
        count = _lower_graph(model.graph, True, ctx, names)
        for function in model.functions.values():
            count += _lower_graph(function.graph, False, ctx, names)
        return count


def why_not_lowerable(node: ir.Node) -> str | None:
    """None if ``node`` (an If) can become a Where, else the reason it cannot."""
    branches = [node.attributes.get("then_branch"), node.attributes.get("else_branch")]
    if any(b is None or b.type != ir.AttributeType.GRAPH for b in branches):
        return "a branch is missing"
    then_graph, else_graph = branches[0].value, branches[1].value
    for label, branch in (("then", then_graph), ("else", else_graph)):
        for inner in branch.all_nodes():
            if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
                   for a in inner.attributes.values()):
                return f"the {label} branch contains control flow ({inner.op_type})"
            if inner.op_type in _NONDETERMINISTIC and inner.domain in ("", "ai.onnx"):
                return f"the {label} branch contains the nondeterministic op {inner.op_type}"
    if len(then_graph.outputs) != len(else_graph.outputs) or len(then_graph.outputs) != len(
            node.outputs):
        return "the branches have different numbers of outputs"
    for k, (t, e) in enumerate(zip(then_graph.outputs, else_graph.outputs)):
        if not isinstance(t.type, ir.TensorType) or not isinstance(e.type, ir.TensorType):
            return f"output {k} is not a tensor in both branches"
        if t.dtype != e.dtype:
            return f"output {k} has dtype {t.dtype} vs {e.dtype}"
        if not _same_known_shape(t.shape, e.shape):
            return (f"output {k} has shapes {_show(t.shape)} vs {_show(e.shape)}, which Where "
                    f"cannot select between (different or not fully known)")
    return None


def _lower_graph(graph: ir.Graph, is_main: bool, ctx: RuleContext, names) -> int:
    count = 0
    for node in list(graph):
        for attribute in node.attributes.values():  # innermost first
            if attribute.type == ir.AttributeType.GRAPH:
                count += _lower_graph(attribute.value, False, ctx, names)
            elif attribute.type == ir.AttributeType.GRAPHS:
                for sub in attribute.value:
                    count += _lower_graph(sub, False, ctx, names)
        if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
            continue
        reason = why_not_lowerable(node)
        if reason is not None:
            warnings.warn(
                f"IfToWhere: If node {node.name!r} stays in the graph: {reason}. Target "
                f"{ctx.caps.name!r} declares supports_if=False, so the model will not run there.",
                UserWarning, stacklevel=2)
            continue
        _inline(graph, is_main, node, f"{node.name or 'If'}_{next(names)}")
        count += 1
    return count


def _inline(graph: ir.Graph, is_main: bool, node: ir.Node, prefix: str) -> None:
    then_graph = node.attributes["then_branch"].value
    else_graph = node.attributes["else_branch"].value
    new_nodes: list[ir.Node] = []
    results = []
    for label, branch in (("then", then_graph), ("else", else_graph)):
        outputs = list(branch.outputs)
        branch.outputs.clear()
        for name, init in list(branch.initializers.items()):
            branch.initializers.pop(name)
            init.name = f"{prefix}/{label}/{name}"
            if is_main:
                graph.register_initializer(init)
            else:  # functions have no initializers
                const = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", init.const_value)])
                const.outputs[0].type, const.outputs[0].shape = init.type, init.shape
                init.replace_all_uses_with(const.outputs[0])
                if init in outputs:
                    outputs = [const.outputs[0] if o is init else o for o in outputs]
                new_nodes.append(const)
        moved = list(branch)
        for inner in moved:
            branch.remove(inner)
            if inner.name:
                inner.name = f"{prefix}/{label}/{inner.name}"
            for value in inner.outputs:
                if value.name:
                    value.name = f"{prefix}/{label}/{value.name}"
        new_nodes.extend(moved)
        results.append(outputs)
    cond = node.inputs[0]
    if cond.shape is None or len(cond.shape) != 0:  # If accepts a 1-element tensor
        scalar = ir.Value(name=f"{prefix}/scalar_shape", type=ir.TensorType(ir.DataType.INT64),
                          shape=ir.Shape([0]), const_value=ir.tensor(np.zeros((0,), np.int64)))
        if is_main:
            graph.register_initializer(scalar)
        else:
            const = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", scalar.const_value)])
            new_nodes.append(const)
            scalar = const.outputs[0]
        reshape = ir.Node("", "Reshape", [cond, scalar])
        reshape.outputs[0].type, reshape.outputs[0].shape = ir.TensorType(ir.DataType.BOOL), ir.Shape([])
        new_nodes.append(reshape)
        cond = reshape.outputs[0]
    replacements = []
    for k, (t, e) in enumerate(zip(*results)):
        if t is e:
            replacements.append(t)
            continue
        where = ir.Node("", "Where", [cond, t, e], name=f"{prefix}/Where_{k}")
        out = where.outputs[0]
        out.type, out.shape = t.type, t.shape.copy() if t.shape is not None else None
        new_nodes.append(where)
        replacements.append(out)
    graph.insert_before(node, new_nodes)
    for old, new in zip(node.outputs, replacements):
        name = old.name
        was_output = old.is_graph_output()
        old.replace_all_uses_with(new, replace_graph_outputs=True)
        if was_output:
            if new.producer() is not None and new.producer().op_type == "Where":
                old.name = None
                new.name = name
            else:  # a branch returned a captured/input value directly: keep the output name
                identity = ir.Node("", "Identity", [new])
                identity.outputs[0].type, identity.outputs[0].shape = new.type, new.shape
                graph.insert_before(node, identity)
                for i, out in enumerate(graph.outputs):
                    if out is new:
                        graph.outputs[i] = identity.outputs[0]
                old.name = None
                identity.outputs[0].name = name
    graph.remove(node, safe=True)


def _same_known_shape(a: ir.Shape | None, b: ir.Shape | None) -> bool:
    if a is None or b is None or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, int) or isinstance(y, int):
            if x != y:
                return False
            continue
        if not (isinstance(x, ir.SymbolicDim) and isinstance(y, ir.SymbolicDim)
                and isinstance(x.value, str) and x.value and x.value == y.value):
            return False
    return True


def _show(shape: ir.Shape | None) -> str:
    return "unknown" if shape is None else str(list(shape))
