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
import json
import os
import struct

import ml_dtypes
import numpy as np

from mobius.errors import WeightsError

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
}

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
                self._tensors[info.name] = info

    def _shard_paths(self) -> list[str]:
        index_path = os.path.join(self.folder, INDEX_FILE)
        if os.path.isfile(index_path):
            try:
                with open(index_path, encoding="utf-8") as f:
                    weight_map = json.load(f)["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise WeightsError(f"{INDEX_FILE} is malformed: {e}") from e
            if not isinstance(weight_map, dict) or not all(
                isinstance(shard, str) for shard in weight_map.values()
            ):
                raise WeightsError(
                    f"{INDEX_FILE} is malformed: weight_map must map tensor names to file names"
                )
            paths = []
            for shard in sorted(set(weight_map.values())):
                path = os.path.realpath(os.path.join(self.folder, shard))
                if os.path.commonpath([path, os.path.realpath(self.folder)]) != os.path.realpath(
                    self.folder
                ):
                    raise WeightsError(
                        f"{INDEX_FILE} points outside the checkpoint folder: {shard!r}"
                    )
                if not os.path.isfile(path):
                    raise WeightsError(f"{INDEX_FILE} names a missing shard: {shard!r}")
                paths.append(path)
            return paths
        single = os.path.join(self.folder, SINGLE_FILE)
        if os.path.isfile(single):
            return [single]
        others = sorted(f for f in os.listdir(self.folder) if f.endswith(".safetensors"))
        if others:
            return [os.path.join(self.folder, f) for f in others]
        raise WeightsError(f"{self.folder}: no *.safetensors weights found")

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def names(self) -> list[str]:
        return list(self._tensors)

    def info(self, name: str) -> TensorInfo:
        try:
            return self._tensors[name]
        except KeyError:
            raise WeightsError(f"checkpoint has no tensor named {name!r}") from None

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


def _read_header(path: str) -> list[TensorInfo]:
    name = os.path.basename(path)
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise WeightsError(f"{name} is truncated or not a safetensors file")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(_MAX_HEADER_BYTES, size - 8):
                raise WeightsError(f"{name} is truncated or corrupt (bad header length)")
            header = json.loads(f.read(header_len))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WeightsError(f"{name} is corrupt: its header is not valid JSON") from e
    if not isinstance(header, dict):
        raise WeightsError(f"{name} is corrupt: its header is not a JSON object")
    data_start = 8 + header_len
    infos = []
    for tensor_name, entry in header.items():
        if tensor_name == "__metadata__":
            continue
        try:
            dtype = _SAFETENSORS_DTYPES[entry["dtype"]]
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise WeightsError(f"{name} is corrupt: bad header entry for {tensor_name!r}") from e
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if end - begin != expected or begin < 0:
            raise WeightsError(
                f"{name} is corrupt: {tensor_name!r} spans {end - begin} bytes, expected {expected}"
            )
        if data_start + end > size:
            raise WeightsError(
                f"{name} is truncated: {tensor_name!r} ends at byte {data_start + end} "
                f"but the file has {size} bytes"
            )
        infos.append(TensorInfo(tensor_name, path, dtype, shape, data_start + begin, data_start + end))
    return infos
