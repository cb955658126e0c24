"""Replaces one MatMul(x, W) by the EP's quantized form, with lazily produced initializers.

The producer (RTN of a float weight, a GPTQ / AWQ reader) is a function
returning a QuantizedWeight; it runs when the saver first asks for one of the
node's initializers, and its result is dropped once every part is written,
so at most one Linear's codes are in memory at a time.

Forms (EpCapabilities.quant_form):
    matmul_nbits:      MatMulNBits(x, B, scales[, zero_points])   (body attached)
    dequantize_linear: MatMul(x, DequantizeLinear(codes[K, N], scales[, zp], axis=0, block_size))
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import onnx_ir as ir

from mobius.contrib.matmul_nbits import MatMulNBitsSpec, make_matmul_nbits_node
from mobius.quantize import packing
from mobius.quantize.quantized_weight import QuantizedWeight

Producer = Callable[[], QuantizedWeight]
MATMUL_NBITS, DEQUANTIZE_LINEAR = "matmul_nbits", "dequantize_linear"


@dataclasses.dataclass(frozen=True)
class Layout:
    """What the graph must know before the data exists."""

    k: int
    n: int
    bits: int
    block_size: int
    symmetric: bool
    scale_dtype: ir.DataType

    @property
    def blocks(self) -> int:
        return -(-self.k // self.block_size)


class Shared:
    """Produces the QuantizedWeight once for ``parts`` lazy initializers."""

    def __init__(self, produce: Producer, parts: int):
        self._produce, self._parts, self._served, self._value = produce, parts, 0, None

    def part(self, convert: Callable[[QuantizedWeight], np.ndarray], dtype: ir.DataType):
        def load() -> ir.Tensor:
            if self._value is None:
                self._value = self._produce()
            array = convert(self._value)
            self._served += 1
            if self._served % self._parts == 0:
                self._value = None  # every part written: free the codes
            return ir.Tensor(array, dtype=dtype)

        return load


def emit_quantized_matmul(model: ir.Model, matmul: ir.Node, produce: Producer, layout: Layout,
                          form: str, accuracy_level: int, name: str) -> None:
    """Replaces ``matmul`` (its input 1 is the weight) in place; ``name`` prefixes initializers."""
    graph = model.graph
    parts = _parts(layout, form)
    shared = Shared(produce, len(parts))
    values = [lazy_initializer(graph, f"{name}{suffix}", shared.part(fn, dtype), dtype, shape)
              for suffix, fn, dtype, shape in parts]
    x = matmul.inputs[0]
    if form == MATMUL_NBITS:
        spec = MatMulNBitsSpec(layout.k, layout.n, layout.bits, layout.block_size, accuracy_level,
                               zero_points=not layout.symmetric)
        nodes = [make_matmul_nbits_node(model, spec, [x, *values], _derived(matmul, "MatMulNBits"))]
    else:
        attributes = [ir.AttrInt64("axis", 0), ir.AttrInt64("block_size", layout.block_size)]
        dq = ir.Node("", "DequantizeLinear", values, attributes=attributes,
                     name=_derived(matmul, "DequantizeLinear"))
        nodes = [dq, ir.Node("", "MatMul", [x, dq.outputs[0]], name=matmul.name)]
    replace_node(graph, matmul, nodes)


def replace_node(graph: ir.Graph, old_node: ir.Node, nodes: list[ir.Node]) -> None:
    """Inserts ``nodes`` before ``old_node``, whose one output the last of them takes over;
    removes it, and its constant inputs that nothing reads any more."""
    old, new = old_node.outputs[0], nodes[-1].outputs[0]
    new.type, new.shape = old.type, old.shape
    graph.insert_before(old_node, nodes)
    was_output, out_name = old.is_graph_output(), old.name
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if was_output:
        old.name, new.name = None, out_name
    inputs = list(old_node.inputs)
    graph.remove(old_node, safe=True)
    for value in inputs:
        if (value is not None and value.is_initializer() and not value.uses()
                and value.name in graph.initializers):
            graph.initializers.pop(value.name)


def _parts(layout: Layout, form: str) -> list:
    """(suffix, QuantizedWeight -> array, dtype, shape) of each initializer, in input order."""
    n, k, blocks, bits = layout.n, layout.k, layout.blocks, layout.bits
    scale = np.dtype(ir.DataType(layout.scale_dtype).numpy())
    if form == MATMUL_NBITS:
        zero_cols = -(-blocks // 2) if bits == 4 else blocks
        parts = [("_Q", packing.matmul_nbits_b, ir.DataType.UINT8,
                  [n, blocks, layout.block_size * bits // 8]),
                 ("_scales", lambda q: q.scales.astype(scale), layout.scale_dtype, [n, blocks]),
                 ("_zero_points", packing.matmul_nbits_zero_points, ir.DataType.UINT8,
                  [n, zero_cols])]
    else:
        zero = packing.dequantize_linear_type(bits, False, zero_point=True)
        parts = [("_Q", packing.dequantize_linear_codes,
                  packing.dequantize_linear_type(bits, layout.symmetric), [k, n]),
                 ("_scales", lambda q: np.ascontiguousarray(q.scales.T.astype(scale)),
                  layout.scale_dtype, [blocks, n]),
                 ("_zero_points", packing.dequantize_linear_zero_points, zero, [blocks, n])]
    return parts[:2] if layout.symmetric else parts


def lazy_initializer(graph: ir.Graph, name: str, load, dtype: ir.DataType, shape) -> ir.Value:
    """Registers an initializer backed by ``ir.LazyTensor(load)`` under a fresh name."""
    candidate, i = name, 1
    while candidate in graph.initializers:
        candidate, i = f"{name}.{i}", i + 1
    tensor = ir.LazyTensor(load, dtype, ir.Shape(shape), name=candidate)
    value = ir.Value(name=candidate, type=ir.TensorType(dtype), shape=ir.Shape(shape),
                     const_value=tensor)
    graph.register_initializer(value)
    return value


def _derived(node: ir.Node, suffix: str) -> str | None:
    return f"{node.name}/{suffix}" if node.name else None
