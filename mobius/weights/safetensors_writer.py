"""Writes numpy arrays as safetensors files (single or sharded), without torch."""

from __future__ import annotations

import json
import os
import struct
from typing import Iterable, Mapping

import ml_dtypes
import numpy as np

_DTYPE_NAMES = {
    np.dtype(np.float64): "F64",
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(ml_dtypes.bfloat16): "BF16",
    np.dtype(np.int64): "I64",
    np.dtype(np.int32): "I32",
}


def write_safetensors(path: str, tensors: Mapping[str, np.ndarray]) -> None:
    header = {}
    offset = 0
    for name, array in tensors.items():
        size = array.nbytes
        header[name] = {
            "dtype": _DTYPE_NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array).tobytes())


def write_sharded(folder: str, tensors: Iterable[tuple[str, np.ndarray]], num_shards: int) -> None:
    """Writes ``num_shards`` files + model.safetensors.index.json, one shard in memory at a time.

    ``tensors`` is consumed lazily; it must be a sequence (its length splits the shards).
    """
    items = list(tensors) if not isinstance(tensors, list) else tensors
    num_shards = max(1, min(num_shards, len(items)))
    per_shard = -(-len(items) // num_shards)
    num_shards = -(-len(items) // per_shard)  # no empty trailing shard
    weight_map = {}
    total = 0
    for shard in range(num_shards):
        chunk = items[shard * per_shard : (shard + 1) * per_shard]
        filename = f"model-{shard + 1:05d}-of-{num_shards:05d}.safetensors"
        arrays = {name: make() if callable(make) else make for name, make in chunk}
        write_safetensors(os.path.join(folder, filename), arrays)
        for name, array in arrays.items():
            weight_map[name] = filename
            total += array.nbytes
        del arrays
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
