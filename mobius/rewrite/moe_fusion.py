"""Fuse: the decomposed sparse-MoE routing -> com.microsoft MoE.

Pattern (per MoE block, as emitted by mobius.components.moe):

    probs   = Softmax([Cast f32](logits))                       logits [..., E]
    kth     = ReduceMin(TopK(probs, k).values, [-1])
    routing = Where(GreaterOrEqual(probs, kth), probs, 0)  [Div by its ReduceSum]
    out     = ConstantOfShape(Shape(x), 0)
    for each expert e (any order, each of 0..E-1 once):
        w     = Gather(routing, e, axis=-1)
        index = Transpose(NonZero(Greater(w, 0)))
        xe    = GatherND(x, index)
        y     = MatMul(Mul(silu(MatMul(xe, Wg_e)), MatMul(xe, Wu_e)), Wd_e)   silu = g*Sigmoid(g)
        out   = ScatterND(out, index, [Cast f32](y) * Unsqueeze(GatherND(w, index)), "add")
    result  = [Cast dtype](out)

Rewrite:

    result = MoE(x, Reshape(logits, [-1, E]), fc1 [E, 2I, H], , fc2 [E, H, I],
                 k, normalize_routing_weights, activation_type="swiglu", swiglu_fusion=1)

with fc1/fc2 new initializers that stack the experts' weights lazily (read
at save time, like every weight). The node carries its standard-op function
body (mobius/contrib/moe.py), so where the EP lacks the kernel the inline
stage restores this routing.

When the fused op is exact: the kernel's routing is softmax over all E ->
top-k -> optional renormalization (``normalize_routing_weights``), which is
Mixtral's (always renormalized) and Qwen-MoE's (``norm_topk_prob`` either
way). A routing without renormalization is built as the renormalizing op times
each token's top-k probability mass (mobius.contrib.moe.times_top_k_mass,
exact): onnxruntime 1.30's CPU kernel (onnxruntime-node's newest) got the
unnormalized form wrong (testing/js:ort_js_test). Experts must be SiLU-gated without biases, or (gpt-oss) stacked experts with
biases and the clamped SwiGLU of mobius.components.moe.stacked_expert, which
the kernel's activation_alpha / activation_beta / swiglu_limit and bias inputs
express exactly (mobius/rewrite/moe_swiglu_expert.py). Anything else (GELU-gated
experts, a different routing such as sigmoid/grouped top-k, or a partial expert
set) does not match and stays decomposed. A shared expert
(Qwen2-MoE) is outside the pattern and stays as it is next to the MoE op.
Two differences are rounding-level only: the kernel accumulates the
weighted expert outputs in its own order/precision (the pattern accumulates
in float32), and exact ties at the k-th router probability pick more than k
experts in the pattern but exactly k in the kernel.

Legal where the EP's MoE kernel takes the build dtype (``caps.fuses_moe``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.components.moe import SwiGlu
from mobius.contrib.moe import OP_TYPE, MoeSpec, make_moe_node, times_top_k_mass
from mobius.ep.capabilities import FLOAT_DTYPES
from mobius.rewrite.fusion_util import constant
from mobius.rewrite.moe_swiglu_expert import SwigluExpert, fc_loaders, swiglu_expert
from mobius.rewrite.rule import NodeRule, RuleContext, attr, initializer_array, producer

F32 = ir.DataType.FLOAT


@dataclasses.dataclass
class _Expert:
    index: int
    gate: ir.Value  # [H, I] MatMul weight
    up: ir.Value  # [H, I]
    down: ir.Value  # [I, H]


@dataclasses.dataclass
class _Match:
    anchor: ir.Node  # the last node of the pattern (final ScatterND or its Cast)
    result: ir.Value  # what the MoE op replaces
    x: ir.Value
    logits: ir.Value
    top_k: int
    normalize: bool
    experts: list  # of _Expert, or of SwigluExpert
    hidden: int
    inter: int


class MoEFusion(NodeRule):
    name = "MoEFusion"
    stage = "fuse"
    order = 80

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.caps.fuses_moe(ctx.dtype) and ctx.caps.has_kernel(OP_TYPE)

    def match(self, node: ir.Node) -> _Match | None:
        if not _is_scatter_add(node) or _continues_chain(node.outputs[0]):
            return None
        links = []
        current = node
        while _is_scatter_add(current):
            links.append(current)
            current = current.inputs[0].producer()
        x = _zeros_like(current)
        if x is None or x.shape is None or len(x.shape) not in (2, 3) or x.dtype not in FLOAT_DTYPES:
            return None
        dtype = x.dtype
        anchor, result = node, node.outputs[0]
        if dtype != F32:
            cast = _sole_user(node.outputs[0])
            if cast is None or cast.op_type != "Cast" or attr(cast, "to") != dtype:
                return None
            anchor, result = cast, cast.outputs[0]
        routing = None
        experts = []
        for link in reversed(links):
            parsed = _link(link, x, dtype)
            if parsed is None:
                return None
            link_routing, expert = parsed
            if routing is None:
                routing = link_routing
            elif link_routing is not routing:
                return None
            experts.append(expert)
        parsed = _routing(routing, dtype)
        if parsed is None:
            return None
        logits, top_k, normalize = parsed
        num_experts = logits.shape[-1] if logits.shape is not None else None
        if not isinstance(num_experts, int) or len(logits.shape) != len(x.shape):
            return None
        if sorted(e.index for e in experts) != list(range(num_experts)) or top_k > num_experts:
            return None
        shapes = (_expert_shapes(experts) if all(isinstance(e, _Expert) for e in experts)
                  else _swiglu_shapes(experts))
        if shapes is None:
            return None
        hidden, inter = shapes
        if isinstance(x.shape[-1], int) and x.shape[-1] != hidden:
            return None
        experts.sort(key=lambda e: e.index)
        return _Match(anchor, result, x, logits, top_k, normalize, experts, hidden, inter)

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        graph = model.graph
        dtype = match.x.dtype
        num_experts = len(match.experts)
        shape_2d = constant(graph, np.array([-1, num_experts], dtype=np.int64))
        reshape = ir.Node("", "Reshape", [match.logits, shape_2d],
                          name=f"{match.anchor.name}/MoE/router_logits")
        logits_2d = reshape.outputs[0]
        logits_2d.type = ir.TensorType(dtype)
        logits_2d.shape = ir.Shape([None, num_experts])
        e, i, h = num_experts, match.inter, match.hidden
        first = match.experts[0]
        if isinstance(first, SwigluExpert):
            prefix = _common_prefix([x.w1.value.name for x in match.experts])
            loaders, act = fc_loaders(match.experts), first.act
        else:
            prefix = _common_prefix([x.gate.name for x in match.experts] or [match.anchor.name])
            loaders = (_fc1_loader(match.experts), None, _fc2_loader(match.experts), None)
            act = SwiGlu()
        shapes = [(e, 2 * i, h), (e, 2 * i), (e, h, i), (e, h)]
        names = ["fc1_interleaved", "fc1_bias", "fc2", "fc2_bias"]
        fc1, fc1_bias, fc2, fc2_bias = [
            None if load is None else _stacked(graph, prefix + name, load, dtype, shape)
            for load, name, shape in zip(loaders, names, shapes)]
        scaled = not match.normalize and _rank(match.logits) == _rank(match.x)
        spec = MoeSpec(e, h, i, match.top_k, match.normalize or scaled, dtype, act,
                       fc1_bias is not None)
        inputs = [match.x, logits_2d, fc1, fc1_bias, fc2] + ([fc2_bias] if fc2_bias else [])
        moe = make_moe_node(model, spec, inputs, name=f"{prefix}MoE")
        nodes = [reshape, moe]
        if scaled:
            nodes += times_top_k_mass(moe, match.logits, match.top_k, dtype)
        out = nodes[-1].outputs[0]
        for value in {moe.outputs[0], out}:
            value.type = ir.TensorType(dtype)
            value.shape = match.x.shape.copy() if match.x.shape is not None else None
        graph.insert_before(match.anchor, nodes)
        old = match.result
        name = old.name
        old.replace_all_uses_with(out, replace_graph_outputs=True)
        if out.is_graph_output():
            old.name = None
            out.name = name


# ---------------------------------------------------------------------------
# Pattern pieces
# ---------------------------------------------------------------------------


def _rank(value: ir.Value) -> int | None:
    return len(value.shape) if value.shape is not None else None


def _is_scatter_add(node: ir.Node | None) -> bool:
    return (node is not None and node.op_type == "ScatterND" and node.domain == ""
            and attr(node, "reduction", "none") == "add" and len(node.inputs) == 3)


def _continues_chain(value: ir.Value) -> bool:
    """Whether ``value`` is the accumulator input of another scatter-add (not the chain end)."""
    return any(_is_scatter_add(use.node) and use.idx == 0 for use in value.uses())


def _sole_user(value: ir.Value) -> ir.Node | None:
    uses = value.uses()
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


def _zeros_like(node: ir.Node | None) -> ir.Value | None:
    """x if ``node`` is ConstantOfShape(Shape(x)) filled with 0."""
    if node is None or node.op_type != "ConstantOfShape" or node.domain != "":
        return None
    fill = attr(node, "value")
    if fill is None or np.any(fill.numpy() != 0):
        return None
    shape = producer(node.inputs[0], "Shape")
    if shape is None or attr(shape, "start", 0) != 0 or attr(shape, "end") is not None:
        return None
    return shape.inputs[0]


def _const_int(value: ir.Value | None) -> int | None:
    array = initializer_array(value)
    if array is None or array.size != 1 or array.dtype.kind not in "iu":
        return None
    return int(array.reshape(()))


def _is_last_axis(axis, rank: int | None) -> bool:
    return axis == -1 or (rank is not None and axis == rank - 1)


def _is_last_axes(value: ir.Value | None, rank: int | None) -> bool:
    axes = initializer_array(value)
    return axes is not None and axes.size == 1 and _is_last_axis(int(axes.reshape(())), rank)


def _is_zero(value: ir.Value | None) -> bool:
    array = initializer_array(value)
    return array is not None and array.size == 1 and float(array.reshape(())) == 0.0


def _link(link: ir.Node, x: ir.Value, dtype: ir.DataType):
    """(routing, _Expert) of one ScatterND of the chain, or None."""
    _, index, updates = link.inputs
    transpose = producer(index, "Transpose")
    if transpose is None or list(attr(transpose, "perm", [])) != [1, 0]:
        return None
    nonzero = producer(transpose.inputs[0], "NonZero")
    greater = producer(nonzero.inputs[0], "Greater") if nonzero is not None else None
    if greater is None or not _is_zero(greater.inputs[1]):
        return None
    weight = greater.inputs[0]
    gather = producer(weight, "Gather")
    if gather is None or not _is_last_axis(attr(gather, "axis", 0), _rank(gather.inputs[0])):
        return None
    expert_index = _const_int(gather.inputs[1])
    if expert_index is None or initializer_array(gather.inputs[1]).ndim != 0:
        return None
    routing = gather.inputs[0]
    mul = producer(updates, "Mul")
    if mul is None:
        return None
    rows = None
    for a, b in (mul.inputs, tuple(reversed(mul.inputs))):
        unsqueeze = producer(b, "Unsqueeze")
        if unsqueeze is None or not _is_last_axes(unsqueeze.inputs[1], None):
            continue
        picked = producer(unsqueeze.inputs[0], "GatherND")
        if picked is not None and picked.inputs[0] is weight and picked.inputs[1] is index:
            rows = a
            break
    if rows is None:
        return None
    if dtype != F32:
        cast = producer(rows, "Cast")
        if cast is None or attr(cast, "to") != F32:
            return None
        rows = cast.inputs[0]
    expert = _gated_expert(rows, x, index)
    if expert is None:
        stacked = swiglu_expert(rows, x, index, expert_index)
        return None if stacked is None else (routing, stacked)
    gate, up, down = expert
    return routing, _Expert(expert_index, gate, up, down)


def _weight(matmul: ir.Node | None) -> ir.Value | None:
    """The initializer B of MatMul(A, B)."""
    if matmul is None or len(matmul.inputs) != 2:
        return None
    w = matmul.inputs[1]
    if not w.is_initializer() or w.shape is None or len(w.shape) != 2:
        return None
    if not all(isinstance(d, int) for d in w.shape):
        return None
    return w


def _gated_expert(rows: ir.Value, x: ir.Value, index: ir.Value):
    """(Wg, Wu, Wd) if rows = MatMul(silu(MatMul(xe, Wg)) * MatMul(xe, Wu), Wd), xe = GatherND(x, index)."""
    down = producer(rows, "MatMul")
    wd = _weight(down)
    act = producer(down.inputs[0], "Mul") if wd is not None else None
    if act is None:
        return None
    for silu_value, up_value in (act.inputs, tuple(reversed(act.inputs))):
        gate_value = _silu_input(silu_value)
        gate_mm, up_mm = producer(gate_value, "MatMul"), producer(up_value, "MatMul")
        wg, wu = _weight(gate_mm), _weight(up_mm)
        if wg is None or wu is None:
            continue
        xe = gate_mm.inputs[0]
        if up_mm.inputs[0] is not xe:
            continue
        gathered = producer(xe, "GatherND")
        if gathered is None or gathered.inputs[0] is not x or gathered.inputs[1] is not index:
            continue
        if attr(gathered, "batch_dims", 0):
            continue
        return wg, wu, wd
    return None


def _silu_input(value: ir.Value) -> ir.Value | None:
    """g if value = Mul(g, Sigmoid(g)) (either order)."""
    mul = producer(value, "Mul")
    if mul is None:
        return None
    for g, s in (mul.inputs, tuple(reversed(mul.inputs))):
        sigmoid = producer(s, "Sigmoid")
        if sigmoid is not None and sigmoid.inputs[0] is g:
            return g
    return None


def _routing(routing: ir.Value, dtype: ir.DataType):
    """(logits, k, normalize) if routing is the dense top-k softmax routing, else None."""
    normalize = False
    chosen = routing
    div = producer(routing, "Div")
    if div is not None:
        total = producer(div.inputs[1], "ReduceSum")
        if (total is None or total.inputs[0] is not div.inputs[0]
                or attr(total, "keepdims", 1) != 1 or len(total.inputs) < 2
                or not _is_last_axes(total.inputs[1], _rank(div.inputs[0]))):
            return None
        chosen, normalize = div.inputs[0], True
    where = producer(chosen, "Where")
    if where is None or not _is_zero(where.inputs[2]):
        return None
    compare = producer(where.inputs[0], "GreaterOrEqual")
    probs = where.inputs[1]
    if compare is None or compare.inputs[0] is not probs:
        return None
    reduce_min = producer(compare.inputs[1], "ReduceMin")
    if (reduce_min is None or attr(reduce_min, "keepdims", 1) != 1 or len(reduce_min.inputs) < 2
            or not _is_last_axes(reduce_min.inputs[1], None)):
        return None
    topk = producer(reduce_min.inputs[0], "TopK")
    if (topk is None or topk.outputs[0] is not reduce_min.inputs[0] or topk.inputs[0] is not probs
            or attr(topk, "largest", 1) != 1):
        return None
    softmax = producer(probs, "Softmax")
    if softmax is None or not _is_last_axis(attr(softmax, "axis", -1), _rank(probs)):
        return None
    if not _is_last_axis(attr(topk, "axis", -1), _rank(probs)):
        return None
    top_k = _const_int(topk.inputs[1])
    if top_k is None or top_k <= 0:
        return None
    logits = softmax.inputs[0]
    if dtype != F32:
        cast = producer(logits, "Cast")
        if cast is None or attr(cast, "to") != F32:
            return None
        logits = cast.inputs[0]
    if logits.dtype != dtype:
        return None
    return logits, top_k, normalize


def _expert_shapes(experts: list[_Expert]) -> tuple[int, int] | None:
    """(hidden, inter) if every expert has Wg/Wu [H, I] and Wd [I, H]."""
    shapes = {(tuple(e.gate.shape), tuple(e.up.shape), tuple(e.down.shape)) for e in experts}
    if len(shapes) != 1:
        return None
    (gate, up, down), = shapes
    if gate != up or down != (gate[1], gate[0]):
        return None
    return gate


def _swiglu_shapes(experts: list) -> tuple[int, int] | None:
    """(hidden, inter) if every expert is a SwigluExpert of one shape, activation and
    bias layout."""
    if not all(isinstance(e, SwigluExpert) for e in experts):
        return None
    keys = {(e.w1.shape, e.w2.shape, e.act, e.b1 is None, e.b2 is None) for e in experts}
    if len(keys) != 1:
        return None
    (w1, _, _, _, _), = keys
    return w1[0], w1[1] // 2


# ---------------------------------------------------------------------------
# Stacked expert weights
# ---------------------------------------------------------------------------


def _fc1_loader(experts: list[_Expert]):
    """[E, 2I, H]: row 2i is gate column i, row 2i+1 up column i (interleaved SwiGLU)."""
    sources = [(e.gate.const_value, e.up.const_value) for e in experts]

    def load(name: str):
        stacked = None
        for e, (gate, up) in enumerate(sources):
            g, u = _array(gate, name), _array(up, name)  # [H, I]
            if stacked is None:
                stacked = np.empty((len(sources), 2 * g.shape[1], g.shape[0]), dtype=g.dtype)
            stacked[e, 0::2] = g.T
            stacked[e, 1::2] = u.T
        return stacked

    return load


def _fc2_loader(experts: list[_Expert]):
    """[E, H, I]: each expert's down weight in [out, in] layout."""
    sources = [e.down.const_value for e in experts]

    def load(name: str):
        return np.stack([np.ascontiguousarray(_array(d, name).T) for d in sources])

    return load


def _array(tensor, name: str) -> np.ndarray:
    if tensor is None:
        raise ValueError(f"{name}: an expert weight it stacks has no data (no checkpoint attached)")
    return tensor.numpy()


def _stacked(graph: ir.Graph, name: str, load, dtype: ir.DataType, shape) -> ir.Value:
    base, n = name, 1
    while name in graph.initializers:
        name, n = f"{base}_{n}", n + 1
    tensor = ir.LazyTensor(lambda: ir.Tensor(load(name), dtype=dtype, name=name), dtype=dtype,
                           shape=ir.Shape(shape), name=name)
    value = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(shape),
                     const_value=tensor)
    graph.register_initializer(value)
    return value


def _common_prefix(names: list[str]) -> str:
    """'model.layers.0.mlp.experts.' from the experts' weight names."""
    import os

    prefix = os.path.commonprefix(names)
    return prefix[: prefix.rfind(".") + 1] if "." in prefix else prefix + "."
