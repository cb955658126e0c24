"""A checkpoint whose quantized tensors (FP8, MXFP4) are seen as the float tensors they encode.

Each such tensor appears under its float name (float32, the shape the model
reads) and is computed from its codes and scales only when it is read, one
tensor (or a band of its rows) at a time; the codes and scales themselves are
hidden. Models bind to it exactly as to a float checkpoint; the build then
casts to its dtype or quantizes (--quant) as it would a float weight.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import numpy as np

from mobius.errors import WeightsError
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint, TensorInfo


@dataclasses.dataclass(frozen=True)
class Dequantized:
    """One float tensor stored as codes + scales; ``rows(start, stop)``: its float32
    rows [start, stop) along the first axis, computed from the stored tensors alone."""

    name: str
    shape: tuple[int, ...]
    codes: str  # the checkpoint tensor holding the codes (named in messages)
    rows: Callable[[int, int], np.ndarray]


class DequantizedCheckpoint:
    """Duck-types :class:`SafetensorsCheckpoint` (names / info / read) over ``inner``."""

    def __init__(self, inner: SafetensorsCheckpoint, fmt, tensors: Iterable[Dequantized],
                 hidden: Iterable[str]):
        self.folder = inner.folder
        self.format = fmt
        self._inner = inner
        self._tensors = {t.name: t for t in tensors}
        self._hidden = set(hidden)
        clash = next((n for n, t in self._tensors.items()
                      if n in inner and n != t.codes and n not in self._hidden), None)
        if clash is not None:
            raise WeightsError(f"checkpoint has both the float tensor {clash!r} and the "
                               f"{fmt.method.upper()} codes {self._tensors[clash].codes!r}")

    def __contains__(self, name: str) -> bool:
        return name in self._tensors or (name in self._inner and name not in self._hidden)

    def names(self) -> list[str]:
        return [*self._tensors, *(n for n in self._inner.names()
                                  if n not in self._hidden and n not in self._tensors)]

    def info(self, name: str) -> TensorInfo:
        tensor = self._tensors.get(name)
        if tensor is None:
            if name in self._hidden:
                raise WeightsError(f"checkpoint has no tensor named {name!r}")
            return self._inner.info(name)
        codes = self._inner.info(tensor.codes)
        return TensorInfo(name, codes.path, np.dtype(np.float32), tensor.shape, codes.begin,
                          codes.end)

    def is_stored_as_read(self, name: str) -> bool:
        """A dequantized tensor is computed; every other tensor is stored."""
        return name not in self._tensors

    def read(self, name: str) -> np.ndarray:
        """The float32 values of a dequantized tensor, else the stored tensor."""
        tensor = self._tensors.get(name)
        if tensor is None:
            return self._inner.read(self.info(name).name)
        return tensor.rows(0, tensor.shape[0])

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of ``read(name)``, without computing the others."""
        tensor = self._tensors.get(name)
        if tensor is None:
            return self.read(name)[start:stop]
        return tensor.rows(start, min(stop, tensor.shape[0]))
