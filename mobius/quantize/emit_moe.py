"""Replaces a fused com.microsoft MoE by QMoE with RTN-quantized expert weights (BP-19).

The expert stacks keep the MoE layout ([E, 2I, H] and [E, H, I], rows = output
features), so each is quantized as one [E * rows, cols] matrix, blocks along
the input features, and packed as QMoE expects (mobius.contrib.qmoe).
Only where the EP has the QMoE kernel; QMoE takes no zero points and its blocks
must divide H and I: otherwise the MoE stays float and the reason is logged.
QMoE always renormalizes the top-k routing weights. MoEFusion already builds
the routings that do not (Qwen ``norm_topk_prob=False``, OLMoE, DeepSeek-V2
greedy) as a renormalizing MoE times the top-k probability mass
(mobius.contrib.moe.times_top_k_mass); an MoE left unnormalized (its router
logits do not broadcast over the output) stays float.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from mobius.contrib.moe import MoeSpec
from mobius.contrib.qmoe import QMoeSpec, make_qmoe_node
from mobius.quantize.emit import Shared, lazy_initializer, replace_node
from mobius.quantize.packing import pack_nibbles
from mobius.quantize.rtn import quantize_rtn

logger = logging.getLogger(__name__)


def emit_qmoe(model: ir.Model, moe: ir.Node, bits: int, block_size: int,
              symmetric: bool, method: str) -> bool:
    """Replaces ``moe`` in place; False (MoE left float, reason logged) when QMoE cannot take it."""
    x, logits, fc1, fc1_bias, fc2, fc2_bias = (list(moe.inputs) + [None] * 6)[:6]
    if fc1 is None or fc2 is None or fc1.const_value is None or fc2.const_value is None:
        return False
    experts, fused, hidden = fc1.shape
    inter = fused // 2
    attrs = {name: attr.value for name, attr in moe.attributes.items()}
    reason = None
    # onnxruntime's QMoE (1.32, CPU) takes the softmax over the top-k logits only, i.e.
    # always renormalizes.
    if not attrs.get("normalize_routing_weights"):
        reason = "the router logits do not broadcast over the output (unnormalized routing)"
    elif not symmetric:
        reason = "QMoE takes no zero points (build symmetric to quantize the experts)"
    elif hidden % block_size or inter % block_size:
        reason = f"block size {block_size} does not divide hidden {hidden} and inter {inter}"
    if reason:
        logger.info("%s kept float: %s", moe.name, reason)
        return False
    dtype = fc1.const_value.dtype
    moe_spec = MoeSpec.from_node(moe, experts, hidden, inter, dtype)
    spec = QMoeSpec(moe_spec, bits, block_size)
    graph = model.graph
    weights = []
    for value in (fc1, fc2):
        weights += _quantized_stack(graph, value, bits, block_size, dtype, method)
    inputs = [x, logits, weights[0], weights[1], fc1_bias, weights[2], weights[3]]
    if fc2_bias is not None:
        inputs.append(fc2_bias)
    node = make_qmoe_node(model, spec, inputs, name=f"{moe.name}/QMoE")
    replace_node(graph, moe, [node])
    return True


def _quantized_stack(graph: ir.Graph, value: ir.Value, bits: int, block_size: int,
                     dtype: ir.DataType, method: str) -> list[ir.Value]:
    """[E, rows, cols] float -> (uint8 [E, rows, cols*bits/8], scales [E, rows, cols/block])."""
    experts, rows, cols = value.shape
    source = value.const_value

    def produce():
        return quantize_rtn(source.numpy().reshape(experts * rows, cols), bits, block_size, True,
                            method)

    def codes(qw):
        packed = pack_nibbles(qw.codes) if bits == 4 else qw.codes
        return packed.reshape(experts, rows, -1)

    scale_type = np.dtype(dtype.numpy())
    shared = Shared(produce, 2)
    stem = value.name or "experts"
    return [
        lazy_initializer(graph, f"{stem}_Q{bits}", shared.part(codes, ir.DataType.UINT8),
                         ir.DataType.UINT8, [experts, rows, cols * bits // 8]),
        lazy_initializer(graph, f"{stem}_scales",
                         shared.part(lambda qw: qw.scales.astype(scale_type).reshape(
                             experts, rows, -1), dtype),
                         dtype, [experts, rows, cols // block_size]),
    ]
