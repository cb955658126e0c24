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


_ONNX = {v: k for k, v in _NUMPY.items()}
#: build dtype -> (its bits as unsigned, the magnitude mask, the smallest Inf/NaN pattern)
_BITS = {
    np.dtype(np.float32): (np.uint32, 0x7FFFFFFF, 0x7F800000),
    np.dtype(np.float16): (np.uint16, 0x7FFF, 0x7C00),
    np.dtype(ml_dtypes.bfloat16): (np.uint16, 0x7FFF, 0x7F80),
}
#: values converted or checked at a time
_CHUNK = 1 << 20


def numpy_dtype(dtype: ir.DataType) -> np.dtype:
    """The numpy dtype that stores an ONNX float dtype."""
    return _NUMPY[dtype]


def convert_array(array: np.ndarray, dtype: ir.DataType, name: str) -> np.ndarray:
    """Converts a float array to the build dtype (bf16 goes through float32); a value
    the cast turns into Inf is a WeightsError naming tensor ``name``."""
    return _converted(array, _NUMPY[dtype], name)


def convert_into(array: np.ndarray, out: np.ndarray, name: str) -> None:
    """``out[...] = convert_array(array, <out's dtype>, name)`` (``array`` read in ``out``'s
    shape; ``out`` may be a strided view), ~1M values at a time: no converted copy
    of a large tensor is ever held."""
    if array.size != out.size:
        raise ValueError(f"cannot write {array.size} values into {out.size}")
    array = array.reshape(out.shape)
    if out.ndim == 0:
        out[...] = _converted(array, out.dtype, name)
        return
    step = max(1, _CHUNK // max(1, math.prod(out.shape[1:])))
    for start in range(0, out.shape[0], step):
        out[start:start + step] = _converted(array[start:start + step], out.dtype, name)


def _converted(array: np.ndarray, target: np.dtype, name: str) -> np.ndarray:
    if array.dtype == target:
        return array
    with np.errstate(over="ignore"):  # check_cast names the tensor instead
        if array.dtype == ml_dtypes.bfloat16 or target == ml_dtypes.bfloat16:
            converted = array.astype(np.float32).astype(target)
        else:
            converted = array.astype(target)
    check_cast(name, array, converted)
    return converted


def check_cast(name: str, source: np.ndarray, converted: np.ndarray) -> None:
    """Raises WeightsError when casting ``source`` to ``converted``'s dtype overflowed a
    finite value to Inf (a float64 1e300 in a float32 package, 70000 in float16): every
    logit it reaches would be Inf or NaN. There is no flag to keep such a package; a
    dtype with the range (f32 or bf16) builds it, where one has it.

    Only a cast into a narrower range is checked, ``converted`` 1M values at a time
    (no copy); the source is read again only when the result holds NaN or Inf.
    """
    if _max(converted.dtype) >= _max(source.dtype) or _all_finite(converted):
        return
    wide = source.astype(np.float64)
    finite = np.isfinite(wide)
    if np.count_nonzero(~np.isfinite(converted)) > np.count_nonzero(~finite):
        largest = float(np.abs(wide[finite]).max())
        short = SHORT_NAMES.get(_ONNX.get(converted.dtype), converted.dtype.name)
        fix = ("build with --dtype f32 or bf16, which hold it" if largest <= _max(np.float32)
               else "no build dtype holds it: the checkpoint needs fixing")
        raise WeightsError(f"tensor {name!r} holds {largest:.4g}, beyond the range of "
                           f"{short} (max {_max(converted.dtype):.4g}): it would become Inf; "
                           f"{fix}")


def _all_finite(array: np.ndarray) -> bool:
    """No Inf or NaN in a build-dtype array: the largest magnitude bit pattern, 1M values
    at a time into one small buffer (5x faster than np.isfinite on float16)."""
    unsigned, magnitude, inf = _BITS[array.dtype]
    bits = array.reshape(-1).view(unsigned)
    buffer = np.empty(min(bits.size, _CHUNK), unsigned)
    for start in range(0, bits.size, _CHUNK):
        chunk = bits[start:start + _CHUNK]
        np.bitwise_and(chunk, magnitude, out=buffer[:chunk.size])
        if chunk.size and buffer[:chunk.size].max() >= inf:
            return False
    return True


def _max(dtype: np.dtype) -> float:
    return float(ml_dtypes.finfo(dtype).max)


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
