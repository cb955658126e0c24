"""Unpacks the int32 words GPTQ and AWQ store their 4/8-bit integers in.

Both formats put value i of a word in bits [i * bits, (i + 1) * bits), the
lowest first; they differ in which axis the words run along (and AWQ in the
order of the values inside a word).
"""

from __future__ import annotations

import numpy as np

from mobius.errors import WeightsError


def per_word(bits: int) -> int:
    return 32 // bits


def unpack_words(words: np.ndarray, bits: int, axis: int) -> np.ndarray:
    """int32 words -> uint8 values, each word expanded into 32 // bits
    consecutive entries along ``axis`` (0 or 1 of a 2-D array)."""
    words = np.asarray(words).view(np.uint32)
    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    mask = np.uint32((1 << bits) - 1)
    if axis == 0:
        values = (words[:, None, :] >> shifts[None, :, None]) & mask
        return values.reshape(-1, words.shape[1]).astype(np.uint8)
    values = (words[:, :, None] >> shifts[None, None, :]) & mask
    return values.reshape(words.shape[0], -1).astype(np.uint8)


def check_shape(name: str, actual: tuple[int, ...], expected: tuple[int, ...],
                reason: str) -> None:
    """A one-line error naming the tensor, its shape and the one its neighbours imply."""
    if tuple(actual) != tuple(expected):
        raise WeightsError(f"tensor {name!r} has shape {list(actual)} but {reason} "
                           f"implies {list(expected)}")


def check_dtype(name: str, dtype: np.dtype, allowed: tuple[type, ...]) -> None:
    if np.dtype(dtype) not in [np.dtype(a) for a in allowed]:
        names = " or ".join(np.dtype(a).name for a in allowed)
        raise WeightsError(f"tensor {name!r} is {np.dtype(dtype).name}; expected {names}")


def is_midpoint(zeros: np.ndarray, bits: int) -> bool:
    """Symmetric: every zero point is the implicit 2**(bits - 1)."""
    return bool(np.all(zeros == (1 << (bits - 1))))
