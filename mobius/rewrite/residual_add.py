"""Shared by the Skip*LayerNormalization fusions: the residual Add before a norm.

``split_residual_add`` recognizes ``Add(input, skip)`` in the shapes the
com.microsoft skip-norm kernels accept (input [B,S,H] or [N,H]; skip of the
same shape, or [1,S,H] / [S,H] against a 3-D input), and ``replace_norm``
swaps ``Add`` + norm for the fused node, routing every other use of the sum
(the next residual Add across a layer boundary, a graph output ...) to the
fused node's ``input_skip_bias_sum`` output.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.rewrite.fusion_util import take_over
from mobius.rewrite.rule import producer

#: Tensor dtypes of the Skip*LayerNormalization kernels (type constraint T).
SKIP_NORM_DTYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16})


def same_dim(a, b) -> bool:
    """Dims known equal: equal ints, or the same named symbolic dim (never two unknowns)."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int) and a == b
    return a.value is not None and a.value == b.value


def same_shape(a: ir.Shape | None, b: ir.Shape | None) -> bool:
    return (a is not None and b is not None and len(a) == len(b)
            and all(same_dim(x, y) for x, y in zip(a, b)))


def _input_skip_ok(inp: ir.Value, skip: ir.Value, out: ir.Value) -> bool:
    if inp.shape is None or skip.shape is None or len(inp.shape) not in (2, 3):
        return False
    if inp.dtype not in SKIP_NORM_DTYPES or skip.dtype != inp.dtype:
        return False
    if out.shape is not None and not same_shape(inp.shape, out.shape):
        return False
    if same_shape(inp.shape, skip.shape):
        return True
    if len(inp.shape) != 3:
        return False
    tail = ir.Shape(list(inp.shape)[1:])
    if len(skip.shape) == 2:
        return same_shape(skip.shape, tail)
    return skip.shape[0] == 1 and same_shape(ir.Shape(list(skip.shape)[1:]), tail)


def split_residual_add(value: ir.Value) -> tuple[ir.Node, ir.Value, ir.Value] | None:
    """(add, input, skip) if ``value`` is an Add the skip-norm kernels can absorb."""
    add = producer(value, "Add")
    if add is None or len(add.inputs) != 2 or any(v is None for v in add.inputs):
        return None
    a, b = add.inputs
    for inp, skip in ((a, b), (b, a)):
        if _input_skip_ok(inp, skip, value):
            return add, inp, skip
    return None


def is_last_axis(axis: int, rank: int) -> bool:
    return axis == -1 or axis == rank - 1


def vector_of(value: ir.Value | None, size, dtype: ir.DataType) -> bool:
    """Whether ``value`` is a 1-D ``dtype`` tensor of static length ``size``.

    The kernels read exactly ``hidden`` gamma/beta elements, so a broadcast
    ``[1]`` scale (legal for the standard norms) does not qualify.
    """
    if value is None or value.shape is None or len(value.shape) != 1 or value.dtype != dtype:
        return False
    dim = value.shape[0]
    if not isinstance(dim, int):
        return False
    return dim == size if isinstance(size, int) else dim != 1


def replace_norm(graph: ir.Graph, add: ir.Node, norm: ir.Node, fused: ir.Node) -> None:
    """Puts ``fused`` in place of ``add`` + ``norm`` (fused outputs: 0 = norm, 3 = sum)."""
    graph.insert_after(add, fused)
    take_over(norm.outputs[0], fused.outputs[0])
    take_over(add.outputs[0], fused.outputs[3])
    graph.remove(norm, safe=True)
    graph.remove(add, safe=True)
    # Norm parameters normally are initializers; if one is computed after the
    # Add (a Cast of the weight, say), restore topological order.
    if any(v is not None and v.producer() is not None for v in fused.inputs[2:]):
        graph.sort()
