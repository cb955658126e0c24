"""Streamed access to a checkpoint's safetensors files.

The header of every shard is parsed up front (names, dtypes, shapes, byte
ranges) and checked against the file size, so a truncated file is reported
before any graph is built. Tensor data is read on demand through a memory map,
one tensor at a time: the whole model is never resident.

Each tensor gets its own mapping of just its byte range, released (unmapped)
when the last array viewing it is dropped. A single mapping per shard would
keep every page ever touched resident in the process (file-backed RSS), so
streaming a checkpoint would end with all of it counted against the build.
"""

from __future__ import annotations

import dataclasses
import math
import os
import struct
from typing import Any

import ml_dtypes
import numpy as np

from mobius.checkpoint_files import contained_file
from mobius.errors import WeightsError
from mobius.json_input import parse_json, read_json_file

_SAFETENSORS_DTYPES = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
    # FP8 codes and E8M0 block exponents: read only through their scales (weights/fp8.py)
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E8M0": np.dtype(ml_dtypes.float8_e8m0fnu),
}
_DTYPE_NAMES = {dtype: name for name, dtype in _SAFETENSORS_DTYPES.items()}
#: dtypes that are codes of a quantization format, never a float weight by themselves
FP8_DTYPES = frozenset(_SAFETENSORS_DTYPES[n] for n in ("F8_E4M3", "F8_E5M2", "F8_E8M0"))

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
_MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives and what it is."""

    name: str
    path: str
    dtype: np.dtype
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the file
    end: int


class SafetensorsCheckpoint:
    """All tensors of a checkpoint folder, indexed by name, read lazily."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(folder)
        self._tensors: dict[str, TensorInfo] = {}
        for path in self._shard_paths():
            for info in _read_header(path):
                if info.name in self._tensors:
                    raise WeightsError(
                        f"tensor {info.name!r} is in both "
                        f"{os.path.basename(self._tensors[info.name].path)} and "
                        f"{os.path.basename(path)}"
                    )
                self._tensors[info.name] = info

    def _shard_paths(self) -> list[str]:
        index_path = contained_file(self.folder, INDEX_FILE, INDEX_FILE, WeightsError)
        if os.path.isfile(index_path):
            return [self._shard(name) for name in _index_shards(index_path)]
        single = contained_file(self.folder, SINGLE_FILE, SINGLE_FILE, WeightsError)
        if os.path.isfile(single):
            return [single]
        others = sorted(f for f in os.listdir(self.folder) if f.endswith(".safetensors"))
        if others:
            return [contained_file(self.folder, f, f, WeightsError) for f in others]
        raise WeightsError(f"{self.folder}: no *.safetensors weights found")

    def _shard(self, name: str) -> str:
        path = contained_file(self.folder, name, INDEX_FILE, WeightsError)
        if not os.path.isfile(path):
            raise WeightsError(f"{INDEX_FILE} names a missing shard: {name!r}")
        return path

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def names(self) -> list[str]:
        return list(self._tensors)

    def info(self, name: str) -> TensorInfo:
        try:
            return self._tensors[name]
        except KeyError:
            raise WeightsError(f"checkpoint has no tensor named {name!r}") from None

    def is_stored_as_read(self, name: str) -> bool:
        """``read(name)`` gives exactly the bytes ``info(name)`` points at (so they may be
        copied file to file): always, here; not for a merged or dequantized tensor."""
        return True

    def read(self, name: str) -> np.ndarray:
        """The tensor's data as a read-only view of the memory-mapped file.

        The mapping covers this tensor only and is unmapped once the returned
        array (and every view of it) is garbage collected.
        """
        info = self.info(name)
        if info.end == info.begin:  # nothing to map (mmap would map the whole file)
            empty = np.empty(info.shape, info.dtype)
            empty.flags.writeable = False
            return empty
        try:
            return np.memmap(info.path, dtype=info.dtype, mode="r", offset=info.begin,
                             shape=info.shape)
        except (OSError, ValueError) as e:  # e.g. the file shrank after its header was read
            raise WeightsError(
                f"cannot read {name!r} from {os.path.basename(info.path)} ({e}); "
                f"was the file changed while mobius was running?"
            ) from e


def dtype_name(dtype: np.dtype) -> str:
    """The safetensors spelling of ``dtype`` (F8_E4M3, BF16, ...), for messages."""
    return _DTYPE_NAMES.get(np.dtype(dtype), np.dtype(dtype).name)


def _index_shards(index_path: str) -> list[str]:
    """The shard file names an index's weight_map names (sorted, each once)."""
    index = read_json_file(index_path, INDEX_FILE, WeightsError)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(shard, str) for shard in weight_map.values()
    ):
        raise WeightsError(
            f"{INDEX_FILE} is malformed: weight_map must map tensor names to file names"
        )
    return sorted(set(weight_map.values()))


def _read_header(path: str) -> list[TensorInfo]:
    name = os.path.basename(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise WeightsError(f"{name} is truncated or not a safetensors file")
        (header_len,) = struct.unpack("<Q", prefix)
        if header_len > min(_MAX_HEADER_BYTES, size - 8):
            raise WeightsError(f"{name} is truncated or corrupt (bad header length)")
        header = parse_json(f.read(header_len), f"{name} is corrupt: its header", WeightsError)
    if not isinstance(header, dict):
        raise WeightsError(f"{name} is corrupt: its header is not a JSON object")
    data_start = 8 + header_len
    infos = [dataclasses.replace(_entry(name, tensor_name, entry, data_start, size), path=path)
             for tensor_name, entry in header.items() if tensor_name != "__metadata__"]
    _check_no_overlap(name, infos)
    return infos


def _entry(name: str, tensor_name: str, entry: Any, data_start: int, size: int) -> TensorInfo:
    """One header entry, checked: known dtype, integer shape and offsets that fit the file."""
    def ints(value: Any) -> tuple[int, ...]:
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
        ):
            raise WeightsError(f"{name} is corrupt: bad header entry for {tensor_name!r}")
        return tuple(value)

    dtype_name = entry.get("dtype") if isinstance(entry, dict) else None
    if not isinstance(dtype_name, str):
        raise WeightsError(f"{name} is corrupt: bad header entry for {tensor_name!r}")
    if dtype_name not in _SAFETENSORS_DTYPES:
        raise WeightsError(f"{name}: tensor {tensor_name!r} has dtype {dtype_name[:32]!r}, which "
                           f"mobius does not read (it reads {', '.join(_SAFETENSORS_DTYPES)})")
    dtype = _SAFETENSORS_DTYPES[dtype_name]
    shape = ints(entry.get("shape"))
    offsets = ints(entry.get("data_offsets"))
    if len(offsets) != 2:
        raise WeightsError(f"{name} is corrupt: bad header entry for {tensor_name!r}")
    begin, end = offsets
    expected = math.prod(shape) * dtype.itemsize
    if end - begin != expected:
        raise WeightsError(
            f"{name} is corrupt: {tensor_name!r} spans {end - begin} bytes, expected {expected}"
        )
    if data_start + end > size:
        raise WeightsError(
            f"{name} is truncated: {tensor_name!r} ends at byte {data_start + end} "
            f"but the file has {size} bytes"
        )
    return TensorInfo(tensor_name, "", dtype, shape, data_start + begin, data_start + end)


def _check_no_overlap(name: str, infos: list[TensorInfo]) -> None:
    """Two tensors sharing bytes would silently read each other's data."""
    spans = sorted((i for i in infos if i.end > i.begin), key=lambda i: i.begin)
    for before, after in zip(spans, spans[1:]):
        if after.begin < before.end:
            raise WeightsError(
                f"{name} is corrupt: tensors {before.name!r} and {after.name!r} overlap"
            )
