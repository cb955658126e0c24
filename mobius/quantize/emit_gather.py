"""Replaces an embedding lookup Gather(E[V, H], ids) by its quantized form (--quant-embedding).

E is quantized like a Linear with N = V rows and K = H, blocks along H:

    matmul_nbits EPs:      GatherBlockQuantized(data, ids, scales[, zp])   (body attached;
                           inlined to DequantizeLinear + Gather where the kernel is missing)
    dequantize_linear EPs: Gather(DequantizeLinear(codes[V, H], scales, axis=1, block_size), ids)

H must be a multiple of the block size (GatherBlockQuantized's layout);
otherwise the table stays float and the reason is logged. A tied table
(the LM head reads it too) is quantized once where it can be:
mobius.quantize.emit_tied.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from mobius.contrib.gather_block_quantized import (GatherBlockQuantizedSpec,
                                                   make_gather_block_quantized_node)
from mobius.quantize import packing
from mobius.quantize.emit import MATMUL_NBITS, Shared, lazy_initializer, replace_node
from mobius.quantize.rtn import quantize_rtn_rows

logger = logging.getLogger(__name__)


def emit_quantized_gather(model: ir.Model, gather: ir.Node, bits: int, block_size: int,
                          symmetric: bool, form: str, method: str) -> bool:
    """Replaces ``gather`` (input 0 a float [V, H] initializer) in place; False if left float."""
    table, ids = gather.inputs[0], gather.inputs[1]
    rows, cols = table.shape
    if cols % block_size:
        logger.info("%s kept float: block size %d does not divide %d", table.name, block_size, cols)
        return False
    source, dtype = table.const_value, table.const_value.dtype
    shared = Shared(lambda: quantize_rtn_rows(source, bits, block_size, symmetric, method),
                    2 if symmetric else 3)
    stem = (table.name or "embedding").removesuffix(".weight")
    scale_type = np.dtype(dtype.numpy())
    blocks = cols // block_size

    def initializer(suffix, convert, tensor_type, shape):
        return lazy_initializer(model.graph, f"{stem}{suffix}", shared.part(convert, tensor_type),
                                tensor_type, shape)

    scales = initializer("_scales", lambda q: q.scales.astype(scale_type), dtype, [rows, blocks])
    if form == MATMUL_NBITS:
        data = initializer("_Q", lambda q: packing.matmul_nbits_b(q).reshape(rows, -1),
                           ir.DataType.UINT8, [rows, cols * bits // 8])
        inputs = [data, ids, scales]
        if not symmetric:
            inputs.append(initializer("_zero_points", packing.matmul_nbits_zero_points,
                                      ir.DataType.UINT8, [rows, -(-blocks * bits // 8)]))
        spec = GatherBlockQuantizedSpec(rows, cols, bits, block_size, not symmetric)
        nodes = [make_gather_block_quantized_node(model, spec, inputs, _derived(gather))]
    else:
        codes = initializer("_Q", lambda q: packing.dequantize_linear_codes(q, transposed=False),
                            packing.dequantize_linear_type(bits, symmetric), [rows, cols])
        inputs = [codes, scales]
        if not symmetric:
            inputs.append(initializer(
                "_zero_points", lambda q: packing.dequantize_linear_zero_points(q, transposed=False),
                packing.dequantize_linear_type(bits, False, zero_point=True), [rows, blocks]))
        dq = ir.Node("", "DequantizeLinear", inputs, attributes=[
            ir.AttrInt64("axis", 1), ir.AttrInt64("block_size", block_size)])
        nodes = [dq, ir.Node("", "Gather", [dq.outputs[0], ids], attributes=[
            ir.AttrInt64("axis", 0)], name=gather.name)]
    replace_node(model.graph, gather, nodes)
    return True


def _derived(node: ir.Node) -> str | None:
    return f"{node.name}/GatherBlockQuantized" if node.name else None
