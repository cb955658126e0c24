"""QuantizedWeight -> the initializers of each graph form.

MatMulNBits (com.microsoft): B uint8 [N, blocks, block_size * bits / 8] with
codes packed low nibble first along K; scales [N, blocks]; zero points uint8
[N, blocks] for 8 bits, two per byte (low first) [N, ceil(blocks / 2)] for 4.
Blocked DequantizeLinear (ONNX opset >= 21, axis 0): codes [K, N] as
(u)int4 / (u)int8, scales and zero points [blocks, N]; the symmetric form is
signed with no zero point.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir

from mobius.errors import WeightsError
from mobius.quantize.quantized_weight import QuantizedWeight


def _check_plain(qw: QuantizedWeight) -> None:
    if qw.g_idx is not None:
        raise WeightsError("act-order (g_idx) weights must be reordered before packing")


def pad_k(codes: np.ndarray, qw: QuantizedWeight) -> np.ndarray:
    """[N, K] -> [N, blocks * block_size]; padding codes are never read by A's K columns."""
    padded = qw.num_blocks * qw.block_size
    if padded == qw.in_features:
        return np.ascontiguousarray(codes)
    out = np.zeros((codes.shape[0], padded), dtype=codes.dtype)
    out[:, : qw.in_features] = codes
    return out


def pack_nibbles(values: np.ndarray) -> np.ndarray:
    """uint8 [..., 2m] (each < 16) -> uint8 [..., m], element 2i in the low nibble.

    One result-sized array and no temporaries (an LM head's codes are 0.5 GB)."""
    packed = np.left_shift(values[..., 1::2], 4, dtype=np.uint8)
    packed |= values[..., 0::2]
    return packed


def matmul_nbits_b(qw: QuantizedWeight) -> np.ndarray:
    """uint8 [N, blocks, blob]."""
    _check_plain(qw)
    codes = pad_k(qw.codes, qw)
    if qw.bits == 4:
        codes = pack_nibbles(codes)
    return codes.reshape(qw.out_features, qw.num_blocks, -1)


def matmul_nbits_zero_points(qw: QuantizedWeight) -> np.ndarray | None:
    """uint8 [N, blocks] (8 bits) or [N, ceil(blocks / 2)] (4 bits); None when symmetric."""
    if qw.zero_points is None:
        return None
    zeros = qw.zero_points
    if qw.bits == 4:
        if zeros.shape[1] % 2:
            zeros = np.concatenate([zeros, np.zeros((zeros.shape[0], 1), np.uint8)], axis=1)
        zeros = pack_nibbles(zeros)
    return np.ascontiguousarray(zeros)


def dequantize_linear_type(bits: int, symmetric: bool, zero_point: bool = False) -> ir.DataType:
    """The ONNX type of blocked DequantizeLinear codes (or zero points)."""
    signed = symmetric and not zero_point
    if bits == 4:
        return ir.DataType.INT4 if signed else ir.DataType.UINT4
    return ir.DataType.INT8 if signed else ir.DataType.UINT8


def dequantize_linear_codes(qw: QuantizedWeight, transposed: bool = True) -> np.ndarray:
    """[K, N] ([N, K] unless ``transposed``) int4/uint4/int8/uint8 (ml_dtypes for 4 bits):
    signed when symmetric."""
    _check_plain(qw)
    codes = np.ascontiguousarray(qw.codes.T if transposed else qw.codes)
    if qw.zero_points is None:
        signed = (codes.astype(np.int16) - (1 << (qw.bits - 1))).astype(np.int8)
        return signed.astype(ml_dtypes.int4) if qw.bits == 4 else signed
    return codes.astype(ml_dtypes.uint4) if qw.bits == 4 else codes


def dequantize_linear_zero_points(qw: QuantizedWeight, transposed: bool = True) -> np.ndarray | None:
    """[blocks, N] ([N, blocks] unless ``transposed``) uint4/uint8, or None when symmetric."""
    if qw.zero_points is None:
        return None
    zeros = np.ascontiguousarray(qw.zero_points.T if transposed else qw.zero_points)
    return zeros.astype(ml_dtypes.uint4) if qw.bits == 4 else zeros
