"""GPTQ / AWQ integers -> the EP's quantized form, requantizing only where it must.

A weight bound to a packed checkpoint Linear (or a packed Q/K/V concatenation
of them) carries its PrequantizedSource(s). Its integers are emitted as they
are when the EP takes their bits, zero points and group size. Otherwise:

- a group size the EP does not take but that a block size it takes divides
  (GPTQ's group -1 over 4096 inputs, a group of 48) is re-blocked exactly:
  each group becomes several blocks with the same scale and zero point;
- act-order (GPTQ desc_act, g_idx): the input channels are sorted so that
  every group is contiguous, and a Gather applies the same permutation to
  the activations, x[..., perm] @ W[perm, :] == x @ W. (onnxruntime 1.32's
  CPU MatMulNBits takes a g_idx input but then ignores uint8 zero points,
  so it is not used);
- anything else (no zero points on the EP, bits it lacks, a group no block
  divides, uneven act-order groups) is dequantized and requantized by RTN at
  the build's settings, and the reason is logged.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

import numpy as np
import onnx_ir as ir

from mobius.ep.capabilities import EpCapabilities
from mobius.quantize.emit import Layout, emit_quantized_matmul
from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.quantize.rtn import quantize_rtn
from mobius.quantize.spec import QuantSpec, resolve_quant
from mobius.rewrite.pack_qkv import CONCAT_OF
from mobius.weights.prequantized_checkpoint import PREQUANTIZED, PrequantizedSource
from mobius.weights.quantization_config import PrequantizedFormat

logger = logging.getLogger(__name__)
_GATHERS = "mobius.act_order_gathers"  # graph.meta: (input, permutation) -> its Gather


@dataclasses.dataclass(frozen=True)
class Plan:
    layout: Layout
    produce: Callable[[], QuantizedWeight]
    perm: np.ndarray | None  # input-channel order the activations are gathered in


def prequantized_spec(caps: EpCapabilities, fmt: PrequantizedFormat,
                      accuracy_level: int | None = None) -> QuantSpec:
    """A build of a GPTQ / AWQ checkpoint without --quant: the packed Linears keep
    their integers, every float one (e.g. the lm_head) stays float."""
    return resolve_quant(caps, f"int{fmt.bits}", accuracy_level=accuracy_level,
                         overrides=(("*", "float"),))


def sources_of(tensor: ir.TensorProtocol) -> list[PrequantizedSource] | None:
    """The packed Linear(s) behind a weight ([K, N]; parts concatenated along N), or None."""
    meta = getattr(tensor, "meta", {})
    if PREQUANTIZED in meta:
        return [meta[PREQUANTIZED]]
    concat = meta.get(CONCAT_OF)
    if concat is None or concat.axis != 1:
        return None
    parts = [getattr(p, "meta", {}).get(PREQUANTIZED) for p in concat.parts]
    return parts if all(parts) else None


def plan_for(sources: list[PrequantizedSource], caps: EpCapabilities, spec: QuantSpec,
             scale_dtype: ir.DataType, name: str) -> Plan:
    linears = [s.linear for s in sources]
    first = linears[0]
    k, n = first.in_features, sum(s.out_features for s in sources)
    same = all((lin.bits, lin.block_size, lin.symmetric)
               == (first.bits, first.block_size, first.symmetric)
               and _same_g_idx(lin.g_idx, first.g_idx) for lin in linears)
    block = _ep_block(first.block_size, k, caps)
    reason = _requantize_reason(first, block, same, caps)
    if reason is None:
        concat = _concatenated(sources)
        perm = None if first.g_idx is None else np.argsort(first.g_idx, kind="stable")
        layout = Layout(k, n, first.bits, block, first.symmetric, scale_dtype)
        if block != first.block_size:
            logger.info("%s: %s group size %d re-blocked exactly to %d (the EP's block sizes: %s)",
                        name, first.prefix, first.block_size, block, _sizes(caps))
        return Plan(layout, lambda: _exact(concat(), block, perm), perm)
    bits = first.bits if first.bits in caps.quant_bits else max(caps.quant_bits)
    symmetric = all(lin.symmetric for lin in linears) or not caps.quant_zero_points
    logger.warning("%s: requantizing the packed %s weights (%s) to int%d, block %d, %s",
                   name, first.prefix, reason, bits, spec.block_size,
                   "symmetric" if symmetric else "asymmetric")
    layout = Layout(k, n, bits, spec.block_size, symmetric, scale_dtype)
    return Plan(layout, lambda: quantize_rtn(_dense(sources), bits, spec.block_size, symmetric,
                                             spec.range_method), None)


def emit_prequantized(model: ir.Model, matmul: ir.Node, plan: Plan, spec: QuantSpec,
                      name: str) -> None:
    """``matmul`` -> the quantized form of ``plan`` (behind a Gather for act-order)."""
    if plan.perm is not None:
        matmul.replace_input_with(0, _permuted(model, matmul, plan.perm, name))
    emit_quantized_matmul(model, matmul, plan.produce, plan.layout, spec.form,
                          spec.accuracy_level, name)


def _permuted(model: ir.Model, matmul: ir.Node, perm: np.ndarray, name: str) -> ir.Value:
    """x[..., perm]: one Gather per (input, permutation), shared by the projections that
    read the same activations in the same act-order (e.g. gate and up)."""
    x = matmul.inputs[0]
    cache = model.graph.meta.setdefault(_GATHERS, {})
    key = (id(x), perm.tobytes())
    if key not in cache:
        indices = ir.Value(name=f"{name}_perm", type=ir.TensorType(ir.DataType.INT32),
                           shape=ir.Shape(perm.shape),
                           const_value=ir.tensor(perm.astype(np.int32), name=f"{name}_perm"))
        model.graph.register_initializer(indices)
        gather = ir.Node("", "Gather", [x, indices], attributes=[ir.AttrInt64("axis", -1)],
                         name=f"{matmul.name or name}/act_order")
        gather.outputs[0].type, gather.outputs[0].shape = x.type, x.shape
        model.graph.insert_before(matmul, gather)
        cache[key] = (x, gather.outputs[0])  # x kept alive: its id stays unique
    return cache[key][1]


def _requantize_reason(linear, block: int | None, same: bool, caps: EpCapabilities) -> str | None:
    if not same:
        return "the packed Q/K/V parts differ in bits, group size, zero points or act-order"
    if linear.bits not in caps.quant_bits:
        return f"the EP takes no {linear.bits}-bit weights"
    if not linear.symmetric and not caps.quant_zero_points:
        return "the EP takes no zero points"
    if block is None:
        return (f"group size {linear.block_size} is not a multiple of a block size the EP "
                f"takes ({_sizes(caps)})")
    if linear.g_idx is not None and not _even_groups(linear.g_idx, linear.block_size):
        return "its act-order groups are not all of the group size"
    return None


def _ep_block(group: int, k: int, caps: EpCapabilities) -> int | None:
    """The group size if the EP takes it, else the largest block it takes that splits
    every group exactly (a lone group of the whole input: any block, padding at the end)."""
    if group in caps.quant_block_sizes:
        return group
    fits = [b for b in caps.quant_block_sizes if group % b == 0 or (group == k and b < group)]
    return max(fits, default=None)


def _even_groups(g_idx: np.ndarray, block: int) -> bool:
    """Sorting the channels by group makes every group one contiguous block."""
    return np.array_equal(np.sort(g_idx), np.arange(g_idx.shape[0]) // block)


def _exact(qw: QuantizedWeight, block: int, perm: np.ndarray | None) -> QuantizedWeight:
    """Channels sorted by group (act-order) and groups split into ``block``-sized blocks."""
    codes = qw.codes if perm is None else qw.codes[:, perm]
    repeat = -(-qw.block_size // block)  # blocks per group (the last group may be short)
    blocks = -(-qw.in_features // block)
    scales = np.repeat(qw.scales, repeat, axis=1)[:, :blocks]
    zeros = None if qw.zero_points is None else np.repeat(qw.zero_points, repeat, 1)[:, :blocks]
    return QuantizedWeight(np.ascontiguousarray(codes), np.ascontiguousarray(scales),
                           None if zeros is None else np.ascontiguousarray(zeros), qw.bits, block)


def _dense(sources: list[PrequantizedSource]) -> np.ndarray:
    """float32 [N, K]: the parts dequantized, each by its own groups, stacked."""
    return np.concatenate([s.produce().dequantize() for s in sources])


def _concatenated(sources: list[PrequantizedSource]) -> Callable[[], QuantizedWeight]:
    """Parts with the same bits, groups and act-order as one QuantizedWeight."""

    def produce() -> QuantizedWeight:
        parts = [s.produce() for s in sources]
        if len(parts) == 1:
            return parts[0]
        zeros = None
        if any(p.zero_points is not None for p in parts):
            zeros = np.concatenate([p.zero_point_array() for p in parts])
        return QuantizedWeight(np.concatenate([p.codes for p in parts]),
                               np.concatenate([p.scales for p in parts]), zeros,
                               parts[0].bits, parts[0].block_size, parts[0].g_idx)

    return produce


def _same_g_idx(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None
                                         and np.array_equal(a, b))


def _sizes(caps: EpCapabilities) -> str:
    return ", ".join(str(b) for b in sorted(caps.quant_block_sizes))
