"""Lower: remove every ``Shape`` op, for EPs without one (``caps.supports_shape=False``).

A ``Shape(x, start, end)`` becomes the concatenation of its dims, each one

* a constant, where the dim is known at build time (``x.shape[i]`` is an int);
* else computed *from data*: the dim's length is counted by summing ones
  along that axis of a tensor that has it. The other axes are first sliced
  to length 1, so the work is O(dim), not O(numel)::

      s    = Slice(src, starts=0, ends=1, axes=<every other axis>)   # [1,..,n,..,1]
      s    = Reshape(s, [-1])                                       # [n]
      ones = Cast(Equal(s, s), INT32)            # integer / bool sources
           | Cast(Or(b, Not(b)), INT32), b = Cast(s, BOOL)   # float sources (NaN-safe)
      dim  = Cast(ReduceSum(ones, keepdims=1), INT64)               # [1]

  Arithmetic runs in int32 (what shader-based EPs have) and only the final
  value is int64, which is what ``Shape`` promises its consumers.

Where the dim comes from: ``x`` is first followed back through shape-preserving
ops (Cast, Identity, unary elementwise) to its origin. A *named* symbolic dim
(the graph contract's ``batch_size``, ``sequence_length``,
``total_sequence_length``, ``past_sequence_length``) of a main-graph value is
computed once per graph, from the graph input carrying that name whose other
axes are fewest and never possibly empty -- e.g. ``total_sequence_length``
from ``attention_mask`` [B, T] and ``batch_size`` from ``input_ids`` [B, S],
never from a past KV cache whose ``past_sequence_length`` is 0 on the first
run (an empty other axis would make the count 0). Any other dim is counted on
the origin value itself, which is exact whenever that value's other axes are
non-empty.

A Shape whose input rank is unknown (even at its origin) cannot be lowered: it
is left in place with a warning naming it.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import onnx_ir as ir

from mobius.rewrite.fusion_util import constant, emit
from mobius.rewrite.rule import Rule, RuleContext, attr

#: Named dims that may legally be 0 at run time (an empty KV cache on the first
#: call): never counted through a tensor with such an axis.
POSSIBLY_EMPTY_DIMS = frozenset({"past_sequence_length"})

#: Ops whose output 0 has exactly the shape of input 0.
_SHAPE_PRESERVING = frozenset({
    "Cast", "CastLike", "Identity", "Neg", "Abs", "Not", "Relu", "Sigmoid", "Tanh", "Exp", "Log",
    "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Erf", "IsNaN", "IsInf", "Softmax",
    "LogSoftmax", "Softplus", "Softsign", "Elu", "Selu", "LeakyRelu", "HardSigmoid", "Gelu",
    "Sin", "Cos", "Tan",
})

_INTEGER_OR_BOOL = frozenset({
    ir.DataType.INT8, ir.DataType.INT16, ir.DataType.INT32, ir.DataType.INT64,
    ir.DataType.UINT8, ir.DataType.UINT16, ir.DataType.UINT32, ir.DataType.UINT64,
    ir.DataType.BOOL,
})


class ShapeElimination(Rule):
    name = "ShapeElimination"
    stage = "lower"
    order = 100

    def applies(self, ctx: RuleContext) -> bool:
        return not ctx.caps.supports_shape

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        count = 0
        for graph, is_main in _graphs(model):
            count += _Lowering(graph, is_main).run()
        return count


def _graphs(model: ir.Model):
    """(graph, is_main_graph) for the main graph, every subgraph and every function body."""
    yield model.graph, True
    for graph in model.graph.subgraphs():
        yield graph, False
    for function in model.functions.values():
        yield function.graph, False
        for graph in function.graph.subgraphs():
            yield graph, False


@dataclasses.dataclass
class _Lowering:
    graph: ir.Graph
    is_main: bool

    def __post_init__(self) -> None:
        self.by_axis: dict[tuple[int, int], ir.Value] = {}
        self.by_name: dict[str, ir.Value] = {}
        self.sources = _named_sources(self.graph) if self.is_main else {}

    def run(self) -> int:
        count = 0
        for node in list(self.graph):
            if node.op_type != "Shape" or node.domain != "":
                continue
            if self._lower(node):
                count += 1
        return count

    def _lower(self, node: ir.Node) -> bool:
        x = node.inputs[0]
        origin = _origin(x)
        rank = _rank(x) if _rank(x) is not None else _rank(origin)
        if rank is None:
            warnings.warn(f"ShapeElimination: cannot lower Shape node {node.name!r}: the rank of "
                          f"{x.name!r} is unknown; it stays in the graph", UserWarning, stacklevel=2)
            return False
        start, end = _normalize(attr(node, "start", 0), attr(node, "end", None), rank)
        new_nodes: list[ir.Node] = []
        pieces: list[ir.Value] = []
        static: list[int] = []

        def flush_static():
            if static:
                pieces.append(self._const(new_nodes, np.array(static, dtype=np.int64)))
                static.clear()

        for axis in range(start, end):
            dim = _dim(x, origin, axis)
            if isinstance(dim, int):
                static.append(dim)
                continue
            flush_static()
            pieces.append(self._dynamic_dim(new_nodes, x, origin, axis, dim))
        flush_static()
        if not pieces:
            result = self._const(new_nodes, np.zeros((0,), dtype=np.int64))
        elif len(pieces) == 1:
            result = pieces[0]
        else:
            result = emit(new_nodes, "Concat", pieces, axis=0)
        _typed(result, ir.DataType.INT64, [end - start])
        self.graph.insert_before(node, new_nodes)
        old = node.outputs[0]
        name = old.name
        old.replace_all_uses_with(result, replace_graph_outputs=True)
        if result.is_graph_output():
            old.name = None
            result.name = name
        self.graph.remove(node, safe=True)
        return True

    def _dynamic_dim(self, new_nodes, x: ir.Value, origin: ir.Value, axis: int, dim) -> ir.Value:
        name = dim.value if isinstance(dim, ir.SymbolicDim) and isinstance(dim.value, str) else None
        if name is not None and name in self.by_name:
            return self.by_name[name]
        source = self.sources.get(name) if name is not None else None
        if source is not None:
            value, source_axis = source
        else:
            value, source_axis = (origin if _rank(origin) is not None else x), axis
        key = (id(value), source_axis)
        cached = self.by_axis.get(key)
        if cached is None:
            cached = self._count(new_nodes, value, source_axis)
            self.by_axis[key] = cached
        if name is not None and source is not None:
            self.by_name[name] = cached
        return cached

    def _count(self, new_nodes, value: ir.Value, axis: int) -> ir.Value:
        """The length of ``value`` along ``axis`` as int64 [1], computed without Shape."""
        rank = _rank(value)
        dim = value.shape[axis]
        others = [a for a in range(rank) if a != axis]
        x = value
        if others:
            x = emit(new_nodes, "Slice", [
                x, self._const(new_nodes, np.zeros(len(others), dtype=np.int64)),
                self._const(new_nodes, np.ones(len(others), dtype=np.int64)),
                self._const(new_nodes, np.array(others, dtype=np.int64))])
            _typed(x, value.dtype, [dim if a == axis else 1 for a in range(rank)])
            x = emit(new_nodes, "Reshape", [x, self._const(new_nodes, np.array([-1], np.int64))])
            _typed(x, value.dtype, [dim])
        if value.dtype in _INTEGER_OR_BOOL:
            true = emit(new_nodes, "Equal", [x, x])
        else:  # x == x is false for NaN; b | !b is true for every value
            b = _typed(emit(new_nodes, "Cast", [x], to=ir.DataType.BOOL), ir.DataType.BOOL, [dim])
            not_b = _typed(emit(new_nodes, "Not", [b]), ir.DataType.BOOL, [dim])
            true = emit(new_nodes, "Or", [b, not_b])
        _typed(true, ir.DataType.BOOL, [dim])
        ones = _typed(emit(new_nodes, "Cast", [true], to=ir.DataType.INT32), ir.DataType.INT32, [dim])
        total = _typed(emit(new_nodes, "ReduceSum", [ones], keepdims=1), ir.DataType.INT32, [1])
        return _typed(emit(new_nodes, "Cast", [total], to=ir.DataType.INT64), ir.DataType.INT64, [1])

    def _const(self, new_nodes, array: np.ndarray) -> ir.Value:
        if self.is_main:
            return constant(self.graph, array)
        value = emit(new_nodes, "Constant", [], value=ir.tensor(array))
        return _typed(value, ir.DataType.INT64, array.shape)


def _named_sources(graph: ir.Graph) -> dict[str, tuple[ir.Value, int]]:
    """For each named symbolic dim of the graph inputs, the cheapest safe (input, axis)."""
    best: dict[str, tuple[tuple, ir.Value, int]] = {}
    for order, value in enumerate(graph.inputs):
        if value.shape is None or value.type is None:
            continue
        dims = list(value.shape)
        for axis, dim in enumerate(dims):
            name = _dim_name(dim)
            if name is None:
                continue
            others = [d for a, d in enumerate(dims) if a != axis]
            if any(_dim_name(d) in POSSIBLY_EMPTY_DIMS for d in others):
                continue
            if any(isinstance(d, int) and d == 0 for d in others):
                continue
            dynamic_others = sum(not isinstance(d, int) for d in others)
            score = (dynamic_others, len(dims), value.dtype not in _INTEGER_OR_BOOL, order)
            if name not in best or score < best[name][0]:
                best[name] = (score, value, axis)
    return {name: (value, axis) for name, (_, value, axis) in best.items()}


def _dim_name(dim) -> str | None:
    if isinstance(dim, ir.SymbolicDim) and isinstance(dim.value, str) and dim.value:
        return dim.value
    return None


def _origin(value: ir.Value) -> ir.Value:
    """Follows shape-preserving single-input ops back to where the shape was made."""
    seen = 0
    while seen < 1000:
        node = value.producer()
        if node is None or node.domain != "" or node.op_type not in _SHAPE_PRESERVING:
            return value
        if not node.inputs or node.inputs[0] is None:
            return value
        value = node.inputs[0]
        seen += 1
    return value


def _rank(value: ir.Value) -> int | None:
    return None if value.shape is None else len(value.shape)


def _dim(x: ir.Value, origin: ir.Value, axis: int):
    """The best-known dim at ``axis``: an int if either value knows it, else origin's symbol."""
    candidates = [v.shape[axis] for v in (x, origin) if v.shape is not None]
    for dim in candidates:
        if isinstance(dim, int):
            return dim
    for dim in candidates:
        if _dim_name(dim) is not None:
            return dim
    return candidates[0] if candidates else None


def _normalize(start: int, end: int | None, rank: int) -> tuple[int, int]:
    """Shape's start/end semantics: negative counts from the back, then clamp to [0, rank]."""
    end = rank if end is None else end
    start = start + rank if start < 0 else start
    end = end + rank if end < 0 else end
    start, end = min(max(start, 0), rank), min(max(end, 0), rank)
    return start, max(start, end)


def _typed(value: ir.Value, dtype: ir.DataType | None, dims) -> ir.Value:
    if dtype is not None:
        value.type = ir.TensorType(dtype)
    value.shape = ir.Shape([d.value if isinstance(d, ir.SymbolicDim) else d for d in dims])
    return value
