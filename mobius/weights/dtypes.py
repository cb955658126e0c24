"""Build dtypes (f32/f16/bf16) and numpy conversion without torch."""

from __future__ import annotations

import logging
import math

import ml_dtypes
import numpy as np
import onnx_ir as ir

from mobius.errors import MobiusError, WeightsError
from mobius.weights.safetensors_checkpoint import FP8_DTYPES, dtype_name

logger = logging.getLogger(__name__)

_BUILD_DTYPES = {
    "f32": ir.DataType.FLOAT,
    "fp32": ir.DataType.FLOAT,
    "float32": ir.DataType.FLOAT,
    "f16": ir.DataType.FLOAT16,
    "fp16": ir.DataType.FLOAT16,
    "float16": ir.DataType.FLOAT16,
    "bf16": ir.DataType.BFLOAT16,
    "bfloat16": ir.DataType.BFLOAT16,
}

SHORT_NAMES = {ir.DataType.FLOAT: "f32", ir.DataType.FLOAT16: "f16", ir.DataType.BFLOAT16: "bf16"}

_NUMPY = {
    ir.DataType.FLOAT: np.dtype(np.float32),
    ir.DataType.FLOAT16: np.dtype(np.float16),
    ir.DataType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
}


def parse_dtype(value: str | ir.DataType) -> ir.DataType:
    """Maps a user-facing dtype name ("f16", "bf16", ...) to an ONNX dtype."""
    if isinstance(value, ir.DataType):
        if value not in _NUMPY:
            raise MobiusError(f"unsupported dtype {value.name}; choose one of f32, f16, bf16")
        return value
    key = str(value).lower()
    if key not in _BUILD_DTYPES:
        raise MobiusError(f"unknown dtype {value!r}; choose one of f32, f16, bf16")
    return _BUILD_DTYPES[key]


def numpy_dtype(dtype: ir.DataType) -> np.dtype:
    """The numpy dtype that stores an ONNX float dtype."""
    return _NUMPY[dtype]


def convert_array(array: np.ndarray, dtype: ir.DataType) -> np.ndarray:
    """Converts a float array to the build dtype (bf16 goes through float32)."""
    return _converted(array, _NUMPY[dtype])


def convert_into(array: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = convert_array(array, <out's dtype>)`` (``array`` read in ``out``'s
    shape; ``out`` may be a strided view), ~1M values at a time: no converted copy
    of a large tensor is ever held."""
    if array.size != out.size:
        raise ValueError(f"cannot write {array.size} values into {out.size}")
    array = array.reshape(out.shape)
    if out.ndim == 0:
        out[...] = _converted(array, out.dtype)
        return
    step = max(1, (1 << 20) // max(1, math.prod(out.shape[1:])))
    for start in range(0, out.shape[0], step):
        out[start:start + step] = _converted(array[start:start + step], out.dtype)


def _converted(array: np.ndarray, target: np.dtype) -> np.ndarray:
    if array.dtype == target:
        return array
    if array.dtype == ml_dtypes.bfloat16 or target == ml_dtypes.bfloat16:
        return array.astype(np.float32).astype(target)
    return array.astype(target)


def check_source_dtype(name: str, source: np.dtype, target: ir.DataType) -> None:
    """Integer or boolean data for a float weight is a corrupt checkpoint, not a cast;
    FP8 codes mean nothing without the block scales a quantization_config pairs them with."""
    if target in _NUMPY and source.kind in "iub":
        raise WeightsError(f"tensor {name!r} holds {source.name} data but the model expects "
                           f"a float weight")
    if source in FP8_DTYPES:
        raise WeightsError(f"tensor {name!r} has dtype {dtype_name(source)} (FP8) but no scales "
                           f"to read it with (config.json quantization_config quant_method fp8)")


def warn_if_not_finite(name: str, array: np.ndarray) -> bool:
    """Warns about NaN/Inf weights (they make every logit NaN); the tensor is still used.
    Returns whether it warned.

    Checked in chunks of 1M values, so the check itself allocates little.
    """
    if not (array.dtype.kind == "f" or array.dtype == ml_dtypes.bfloat16):
        return False
    flat = array.reshape(-1)
    for start in range(0, flat.size, 1 << 20):
        chunk = flat[start:start + (1 << 20)]
        if array.dtype == ml_dtypes.bfloat16:  # exponent bits all set: Inf or NaN
            bad = ((chunk.view(np.uint16) & 0x7F80) == 0x7F80).any()
        else:
            bad = not np.isfinite(chunk).all()
        if bad:
            logger.warning("warning: checkpoint tensor %r holds NaN or Inf values", name)
            return True
    return False
