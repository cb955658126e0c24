"""FP8 Linear weights (``quant_method: fp8``) dequantized block by block when read.

Layout (transformers' fine-grained FP8, as DeepSeek-V3 and Qwen3-FP8 ship it):
``X.weight`` F8_E4M3 (or F8_E5M2) [..., N, K] and ``X.weight_scale_inv``
[..., ceil(N / bn), ceil(K / bk)] for ``weight_block_size`` [bn, bk]: one
scale per block of bn x bk weights, the last block of a row or column short
when bn or bk does not divide N or K. With ``weight_block_size: null`` the
scale is one value per tensor. Scales are float32 (DeepSeek-V3), bfloat16 or
float16, or E8M0 exponents (``scale_fmt: ue8m0``, U8 or F8_E8M0: 2**(e - 127)).
weight = float(code) * scale of its block, in float32: the product of an FP8
code and a float32 scale is rounded once, as transformers' dequantizing load
computes it. Linears without a scale (``modules_to_not_convert``, e.g. the
lm_head) are stored float and read as they are. ``X.activation_scale`` (the
static activation scheme's FP8 input scale) is not read: the package runs
float activations, like transformers' dequantized model.
"""

from __future__ import annotations

import logging

import ml_dtypes
import numpy as np

from mobius.errors import WeightsError
from mobius.weights.dequantized_checkpoint import Dequantized, DequantizedCheckpoint
from mobius.weights.packed_bits import check_shape
from mobius.weights.quantization_config import Fp8Format
from mobius.weights.safetensors_checkpoint import (FP8_DTYPES, SafetensorsCheckpoint,
                                                   dtype_name)

logger = logging.getLogger(__name__)

SCALE, ACTIVATION_SCALE = "_scale_inv", ".activation_scale"
_CODES = (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2))
_FLOAT_SCALES = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


def open_fp8(checkpoint: SafetensorsCheckpoint, fmt: Fp8Format) -> DequantizedCheckpoint:
    """The checkpoint with every ``X.weight`` that has an ``X.weight_scale_inv`` seen as
    its float32 values; every shape and dtype is checked here, before any data is read."""
    scales = [n for n in checkpoint.names() if n.endswith(".weight" + SCALE)]
    if not scales:
        raise WeightsError("config.json declares FP8 quantization but the checkpoint has no "
                           "FP8 Linear (no *.weight_scale_inv tensor)")
    tensors = [_weight(checkpoint, name[:-len(SCALE)], name, fmt) for name in scales]
    activation = [n for n in checkpoint.names() if n.endswith(ACTIVATION_SCALE)]
    if activation:
        logger.warning("FP8 checkpoint: %d static activation scales (e.g. %r) are not used; "
                       "the package computes with float activations", len(activation),
                       activation[0])
    covered = {t.codes for t in tensors}
    for name in checkpoint.names():
        info = checkpoint.info(name)
        if info.dtype in FP8_DTYPES and name not in covered and name not in scales:
            raise WeightsError(f"tensor {name!r} has dtype {dtype_name(info.dtype)} (FP8) but "
                               f"the checkpoint has no {name + SCALE!r} to scale it")
    return DequantizedCheckpoint(checkpoint, fmt, tensors, [*scales, *activation])


def _weight(checkpoint: SafetensorsCheckpoint, name: str, scale_name: str,
            fmt: Fp8Format) -> Dequantized:
    if name not in checkpoint:
        raise WeightsError(f"checkpoint has {scale_name!r} but no {name!r} for it to scale")
    codes, scale = checkpoint.info(name), checkpoint.info(scale_name)
    if codes.dtype not in _CODES:
        raise WeightsError(f"tensor {name!r} has dtype {dtype_name(codes.dtype)}; an FP8 "
                           f"weight (it has {scale_name!r}) must be F8_E4M3 or F8_E5M2")
    e8m0 = scale.dtype == _E8M0 or (fmt.ue8m0 and scale.dtype == np.uint8)
    if not e8m0 and scale.dtype not in _FLOAT_SCALES:
        raise WeightsError(f"tensor {scale_name!r} has dtype {dtype_name(scale.dtype)}; FP8 "
                           f"scales are F32, BF16 or F16 (U8 or F8_E8M0 with scale_fmt ue8m0)")
    shape = codes.shape
    if fmt.block is None:
        if scale.shape not in ((), (1,)):
            raise WeightsError(f"tensor {scale_name!r} has shape {list(scale.shape)} but "
                               f"weight_block_size null (one scale per tensor) implies [] or [1]")
    else:
        if len(shape) < 2:
            raise WeightsError(f"tensor {name!r} has shape {list(shape)}; an FP8 block-"
                               f"quantized weight has at least 2 dimensions")
        grid = (*shape[:-2], *(-(-d // b) for d, b in zip(shape[-2:], fmt.block)))
        check_shape(scale_name, scale.shape, grid,
                    f"{name} {list(shape)} with weight_block_size {list(fmt.block)}")

    def rows(start: int, stop: int) -> np.ndarray:
        scales = _scale_values(checkpoint.read(scale_name), e8m0)
        return dequantize_rows(checkpoint.read(name), scales, fmt.block, start, stop)

    return Dequantized(name, shape, name, rows)


def _scale_values(stored: np.ndarray, e8m0: bool) -> np.ndarray:
    if e8m0:  # E8M0: the byte is a biased exponent (0xFF is NaN)
        return np.asarray(stored).view(_E8M0).astype(np.float32)
    return np.asarray(stored, dtype=np.float32)


def dequantize_rows(codes: np.ndarray, scales: np.ndarray, block: tuple[int, int] | None,
                    start: int, stop: int) -> np.ndarray:
    """float32 rows [start, stop) (first axis) of FP8 ``codes`` [..., N, K] with float32
    ``scales`` (one per tensor, or one per ``block`` of the last two axes)."""
    if block is None:
        return np.asarray(codes[start:stop]).astype(np.float32) * scales.reshape(())
    if codes.ndim > 2:  # stacked matrices: whole ones, with their own scales
        return _blocks(np.asarray(codes[start:stop]), scales[start:stop], block)
    first = start - start % block[0]  # from the start of its block of rows
    part = _blocks(np.asarray(codes[first:stop]), scales[first // block[0]:], block)
    return part[start - first:]


def _blocks(codes: np.ndarray, scales: np.ndarray, block: tuple[int, int]) -> np.ndarray:
    """codes [..., n, K] starting on a block boundary; scales [..., >= ceil(n / bn), *]."""
    rows_per, cols_per = block
    n, k = codes.shape[-2:]
    out = np.empty(codes.shape, np.float32)
    for i in range(-(-n // rows_per)):  # one band of block rows at a time: no weight-sized temp
        band = slice(i * rows_per, min(n, (i + 1) * rows_per))
        wide = np.repeat(scales[..., i:i + 1, :], cols_per, axis=-1)[..., :k]
        np.multiply(codes[..., band, :].astype(np.float32), wide, out=out[..., band, :])
    return out
