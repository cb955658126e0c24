"""AWQ (GEMM packing) Linear tensors -> QuantizedWeight.

Layout (AutoAWQ's WQLinear_GEMM, the format transformers loads):
``qweight`` int32 [K, N / 8] and ``qzeros`` int32 [groups, N / 8], words along
the output dim; value i of a word holds output column 8 * word + ORDER[i]
(the interleave AWQ's kernels want). ``scales`` float16 [groups, N]. Zero
points are stored as they are. weight[k, n] = scales[g, n] * (q[k, n] - zero[g, n]),
g = k // group_size.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from mobius.errors import WeightsError
from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.weights.packed_bits import (check_dtype, check_shape, is_midpoint, per_word,
                                         unpack_words)
from mobius.weights.quantization_config import PrequantizedFormat

REQUIRED = ("qweight", "qzeros", "scales")
OPTIONAL = ()
#: word slot i -> output column (within its group of 8)
ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])
#: output column -> word slot
_SLOT = np.argsort(ORDER)


def awq_features(prefix: str, shapes: Mapping[str, tuple[int, ...]],
                 dtypes: Mapping[str, np.dtype], fmt: PrequantizedFormat) -> tuple[int, int]:
    """(out, in) features of the Linear at ``prefix``, after checking every
    tensor's shape and dtype against qweight's and scales'."""
    pack = per_word(fmt.bits)
    qweight, scales = shapes["qweight"], shapes["scales"]
    check_dtype(f"{prefix}.qweight", dtypes["qweight"], (np.int32,))
    check_dtype(f"{prefix}.qzeros", dtypes["qzeros"], (np.int32,))
    check_dtype(f"{prefix}.scales", dtypes["scales"], (np.float16, np.float32))
    if len(qweight) != 2:
        raise WeightsError(f"tensor {prefix}.qweight has shape {list(qweight)}; expected 2-D")
    in_features, out_features = qweight[0], qweight[1] * pack
    groups = -(-in_features // fmt.group_size)
    why = f"{prefix}.qweight {list(qweight)} with group size {fmt.group_size}"
    check_shape(f"{prefix}.scales", scales, (groups, out_features), why)
    check_shape(f"{prefix}.qzeros", shapes["qzeros"], (groups, out_features // pack), why)
    return out_features, in_features


def unpack_awq(tensors: Mapping[str, np.ndarray], fmt: PrequantizedFormat) -> QuantizedWeight:
    """One Linear's AWQ tensors (shapes checked by :func:`awq_features`) -> QuantizedWeight."""
    codes = _deinterleave(unpack_words(tensors["qweight"], fmt.bits, axis=1))  # [K, N]
    zeros = awq_zero_points(tensors["qzeros"], fmt)
    scales = np.asarray(tensors["scales"], dtype=np.float32)
    return QuantizedWeight(
        codes=np.ascontiguousarray(codes.T),
        scales=np.ascontiguousarray(scales.T),
        zero_points=None if is_midpoint(zeros, fmt.bits) else np.ascontiguousarray(zeros.T),
        bits=fmt.bits,
        block_size=fmt.group_size,
    )


def awq_zero_points(qzeros: np.ndarray, fmt: PrequantizedFormat) -> np.ndarray:
    """uint8 [groups, N], stored as they are."""
    return _deinterleave(unpack_words(qzeros, fmt.bits, axis=1))


def _deinterleave(values: np.ndarray) -> np.ndarray:
    """[rows, N] in word-slot order -> [rows, N] in column order."""
    rows, cols = values.shape
    grouped = values.reshape(rows, cols // 8, 8)
    return grouped[:, :, _SLOT].reshape(rows, cols)
