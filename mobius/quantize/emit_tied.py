"""A tied embedding quantized once: GatherBlockQuantized and MatMulNBits read one initializer.

    emb    = Gather(E[V, H], ids)                  ->  Reshape(GatherBlockQuantized(B, ids,
                                                           Reshape(scales, [V, blocks, 1]),
                                                           quantize_axis=2), [..., H])
    logits = Gemm(x, E, transB=1)  (the LM head)   ->  MatMulNBits(x, B, scales)

B uint8 [V, blocks, blob] and scales [V, blocks] are the head's MatMulNBits
inputs as they are. ONNX Runtime 1.32 checks both shapes when MatMulNBits
prepacks (a 2-D B or a 3-D scales tensor is rejected), and GatherBlockQuantized
wants scales of its data's rank: the lookup reads B in its blocked form
(mobius.contrib.gather_block_quantized) and the scales through a Reshape
that the build never folds. ORT folds it at session load: one copy of the
scales in memory (1/4 of the codes' bytes at f32, block 32). The other way
round (MatMulNBits reading reshaped scales) would free that copy but gives
wrong logits on the CPU EP at accuracy level 4 when the Reshape is not
folded (graph optimizations off). Symmetric only: the kernels disagree on
the zero-point layout of the blocked form. mobius.rewrite.quantize_linears
decides where this applies.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.contrib.gather_block_quantized import (GatherBlockQuantizedSpec,
                                                   make_gather_block_quantized_node)
from mobius.contrib.matmul_nbits import MatMulNBitsSpec, make_matmul_nbits_node
from mobius.quantize import packing
from mobius.quantize.emit import Shared, lazy_initializer, replace_node
from mobius.quantize.rtn import quantize_rtn_rows
from mobius.rewrite.library_passes import NO_FOLD


def emit_tied_quantized(model: ir.Model, gather: ir.Node, head: ir.Node, bits: int,
                        block_size: int, accuracy_level: int, method: str) -> None:
    """Replaces ``gather`` (Gather(E, ids)) and ``head`` (Gemm(x, E, transB=1), no bias)."""
    table, ids = gather.inputs[0], gather.inputs[1]
    rows, cols = table.shape
    blocks = cols // block_size
    source, dtype = table.const_value, table.const_value.dtype
    shared = Shared(lambda: quantize_rtn_rows(source, bits, block_size, True, method), 2)
    stem = (table.name or "embedding").removesuffix(".weight")
    scale_type = np.dtype(dtype.numpy())
    data = lazy_initializer(model.graph, f"{stem}_Q", shared.part(packing.matmul_nbits_b,
                                                                  ir.DataType.UINT8),
                            ir.DataType.UINT8, [rows, blocks, block_size * bits // 8])
    scales = lazy_initializer(model.graph, f"{stem}_scales",
                              shared.part(lambda q: q.scales.astype(scale_type), dtype),
                              dtype, [rows, blocks])
    replace_node(model.graph, gather, _lookup(model, gather, data, ids, scales, bits, block_size))
    spec = MatMulNBitsSpec(cols, rows, bits, block_size, accuracy_level, zero_points=False)
    name = f"{head.name}/MatMulNBits" if head.name else None
    replace_node(model.graph, head, [make_matmul_nbits_node(
        model, spec, [head.inputs[0], data, scales], name)])


def _lookup(model: ir.Model, gather: ir.Node, data: ir.Value, ids: ir.Value, scales: ir.Value,
            bits: int, block_size: int) -> list[ir.Node]:
    """Reshape(GatherBlockQuantized(data, ids, scales as [V, blocks, 1]), [ids dims..., H])."""
    rows, blocks = scales.shape
    nodes = [_ints([rows, blocks, 1])]
    view = ir.Node("", "Reshape", [scales, nodes[0].outputs[0]], name=_derived(gather, "scales"))
    view.meta[NO_FOLD] = True
    view.outputs[0].type, view.outputs[0].shape = scales.type, ir.Shape([rows, blocks, 1])
    spec = GatherBlockQuantizedSpec(rows, blocks * block_size, bits, block_size, False,
                                    blocked=True)
    lookup = make_gather_block_quantized_node(model, spec, [data, ids, view.outputs[0]],
                                              _derived(gather, "GatherBlockQuantized"))
    lookup.outputs[0].type = scales.type
    rank = len(ids.shape) if ids.shape is not None else 2
    shape = _ints([0] * rank + [blocks * block_size])  # 0: that dimension of the input
    out = ir.Node("", "Reshape", [lookup.outputs[0], shape.outputs[0]], name=gather.name)
    return nodes + [view, lookup, shape, out]


def _ints(values: list[int]) -> ir.Node:
    node = ir.Node("", "Constant", [], attributes=[ir.AttrInt64s("value_ints", values)])
    node.outputs[0].type = ir.TensorType(ir.DataType.INT64)
    node.outputs[0].shape = ir.Shape([len(values)])
    return node


def _derived(node: ir.Node, suffix: str) -> str | None:
    return f"{node.name}/{suffix}" if node.name else None
