"""GPTQ packed Linear tensors -> QuantizedWeight.

Layout (AutoGPTQ / GPTQModel, the format transformers loads):
``qweight`` int32 [K * bits / 32, N], words along the input dim;
``qzeros`` int32 [groups, N * bits / 32], words along the output dim, each
stored as zero - 1 in the original ("gptq", v1) format and as the zero itself
in "gptq_v2"; ``scales`` float16 [groups, N]; ``g_idx`` int32 [K], the group
of each input channel (a permutation of the blocks under act-order /
desc_act). weight[k, n] = scales[g, n] * (q[k, n] - zero[g, n]), g = g_idx[k].
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from mobius.errors import WeightsError
from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.weights.packed_bits import (check_dtype, check_shape, is_midpoint, per_word,
                                         unpack_words)
from mobius.weights.quantization_config import PrequantizedFormat

#: suffixes of one GPTQ Linear's tensors; g_idx is optional (absent: contiguous groups)
REQUIRED = ("qweight", "qzeros", "scales")
OPTIONAL = ("g_idx",)


def gptq_features(prefix: str, shapes: Mapping[str, tuple[int, ...]],
                  dtypes: Mapping[str, np.dtype], fmt: PrequantizedFormat) -> tuple[int, int]:
    """(out, in) features of the Linear at ``prefix``, after checking every
    tensor's shape and dtype against qweight's."""
    pack = per_word(fmt.bits)
    qweight = shapes["qweight"]
    if len(qweight) != 2:
        raise WeightsError(f"tensor {prefix}.qweight has shape {list(qweight)}; expected 2-D")
    check_dtype(f"{prefix}.qweight", dtypes["qweight"], (np.int32,))
    check_dtype(f"{prefix}.qzeros", dtypes["qzeros"], (np.int32,))
    check_dtype(f"{prefix}.scales", dtypes["scales"], (np.float16, np.float32))
    in_features, out_features = qweight[0] * pack, qweight[1]
    if out_features % pack:
        raise WeightsError(f"tensor {prefix}.qweight has {out_features} output columns, "
                           f"not a multiple of {pack}: qzeros cannot pack them")
    groups = _groups(in_features, fmt.group_size)
    why = f"{prefix}.qweight {list(qweight)} with {fmt.bits}-bit, group size {fmt.group_size}"
    check_shape(f"{prefix}.scales", shapes["scales"], (groups, out_features), why)
    check_shape(f"{prefix}.qzeros", shapes["qzeros"], (groups, out_features // pack), why)
    if "g_idx" in shapes:
        check_dtype(f"{prefix}.g_idx", dtypes["g_idx"], (np.int32, np.int64))
        check_shape(f"{prefix}.g_idx", shapes["g_idx"], (in_features,), why)
    return out_features, in_features


def check_g_idx(name: str, g_idx: np.ndarray, groups: int) -> None:
    """g_idx values must name existing groups (they index scales and zeros)."""
    if g_idx.size and (g_idx.min() < 0 or g_idx.max() >= groups):
        raise WeightsError(f"tensor {name!r} has group indices in [{g_idx.min()}, "
                           f"{g_idx.max()}] but there are {groups} groups")


def gptq_zero_points(qzeros: np.ndarray, fmt: PrequantizedFormat) -> np.ndarray:
    """uint8 [groups, N]: the real zero points (stored + offset, modulo 2**bits)."""
    stored = unpack_words(qzeros, fmt.bits, axis=1)
    return ((stored.astype(np.int32) + fmt.zero_offset) & ((1 << fmt.bits) - 1)).astype(np.uint8)


def act_order(g_idx: np.ndarray | None, block: int) -> np.ndarray | None:
    """int32 g_idx, or None when it is the contiguous k // block (no act-order)."""
    if g_idx is None:
        return None
    g_idx = np.asarray(g_idx).astype(np.int32)
    contiguous = np.arange(g_idx.shape[0], dtype=np.int32) // block
    return None if np.array_equal(g_idx, contiguous) else g_idx


def gptq_block_size(in_features: int, fmt: PrequantizedFormat) -> int:
    return fmt.group_size or in_features


def unpack_gptq(tensors: Mapping[str, np.ndarray], fmt: PrequantizedFormat) -> QuantizedWeight:
    """One Linear's GPTQ tensors (shapes checked by :func:`gptq_features`) -> QuantizedWeight."""
    codes = unpack_words(tensors["qweight"], fmt.bits, axis=0).T  # [N, K]
    block = gptq_block_size(codes.shape[1], fmt)
    zeros = gptq_zero_points(tensors["qzeros"], fmt)
    return QuantizedWeight(
        codes=np.ascontiguousarray(codes),
        scales=np.ascontiguousarray(np.asarray(tensors["scales"], dtype=np.float32).T),
        zero_points=None if is_midpoint(zeros, fmt.bits) else np.ascontiguousarray(zeros.T),
        bits=fmt.bits,
        block_size=block,
        g_idx=act_order(tensors.get("g_idx"), block),
    )


def _groups(in_features: int, group_size: int | None) -> int:
    return 1 if group_size is None else -(-in_features // group_size)
