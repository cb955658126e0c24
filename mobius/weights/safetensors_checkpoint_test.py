"""SafetensorsCheckpoint: single / sharded reading, laziness, and corrupt-file errors."""

from __future__ import annotations

import json
import os
import struct

import ml_dtypes
import numpy as np
import pytest

from mobius.errors import WeightsError
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors, write_sharded

import safetensors.numpy as safetensors_numpy


def _arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "model.embed_tokens.weight": rng.standard_normal((11, 6)).astype(np.float32),
        "model.norm.weight": rng.standard_normal(6).astype(np.float16),
        "lm_head.weight": rng.standard_normal((11, 6)).astype(ml_dtypes.bfloat16),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((13, 6)).astype(np.float32),
    }


def _write_single(folder, arrays=None) -> str:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.safetensors")
    write_safetensors(path, arrays if arrays is not None else _arrays())
    return path


def _raw_file(path, header, data: bytes = b"", header_len: int | None = None) -> None:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob) if header_len is None else header_len))
        f.write(blob)
        f.write(data)


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def test_single_file(tmp_path):
    arrays = _arrays()
    _write_single(tmp_path, arrays)
    checkpoint = SafetensorsCheckpoint(str(tmp_path))
    assert sorted(checkpoint.names()) == sorted(arrays)
    for name, expected in arrays.items():
        assert name in checkpoint
        info = checkpoint.info(name)
        assert info.shape == expected.shape and info.dtype == expected.dtype
        got = checkpoint.read(name)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))
    assert "missing.weight" not in checkpoint


def test_reads_files_written_by_the_safetensors_library(tmp_path):
    arrays = _arrays(1)
    safetensors_numpy.save_file(arrays, str(tmp_path / "model.safetensors"),
                                metadata={"format": "pt"})
    checkpoint = SafetensorsCheckpoint(str(tmp_path))
    for name, expected in arrays.items():
        np.testing.assert_array_equal(checkpoint.read(name).view(np.uint8),
                                      expected.view(np.uint8))


def test_sharded_with_index(tmp_path):
    arrays = _arrays(2)
    write_sharded(str(tmp_path), list(arrays.items()), num_shards=2)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    checkpoint = SafetensorsCheckpoint(str(tmp_path))
    assert sorted(checkpoint.names()) == sorted(arrays)
    shards = {os.path.basename(checkpoint.info(n).path) for n in arrays}
    assert shards == set(index["weight_map"].values())
    for name, expected in arrays.items():
        assert os.path.basename(checkpoint.info(name).path) == index["weight_map"][name]
        np.testing.assert_array_equal(checkpoint.read(name).view(np.uint8),
                                      expected.view(np.uint8))


def test_index_wins_over_stray_files(tmp_path):
    arrays = _arrays(3)
    write_sharded(str(tmp_path), list(arrays.items()), num_shards=2)
    write_safetensors(str(tmp_path / "stray.safetensors"), {"stray": np.zeros(2, np.float32)})
    assert "stray" not in SafetensorsCheckpoint(str(tmp_path))


def test_unnamed_shards_without_index(tmp_path):
    write_safetensors(str(tmp_path / "a.safetensors"), {"a": np.ones(2, np.float32)})
    write_safetensors(str(tmp_path / "b.safetensors"), {"b": np.zeros(3, np.float16)})
    checkpoint = SafetensorsCheckpoint(str(tmp_path))
    assert sorted(checkpoint.names()) == ["a", "b"]
    np.testing.assert_array_equal(checkpoint.read("b"), np.zeros(3, np.float16))


def test_no_weights_at_all(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(WeightsError, match="no \\*.safetensors weights found"):
        SafetensorsCheckpoint(str(tmp_path))


def test_unknown_tensor_name_is_named(tmp_path):
    _write_single(tmp_path)
    with pytest.raises(WeightsError, match="'not.there'"):
        SafetensorsCheckpoint(str(tmp_path)).info("not.there")


# ---------------------------------------------------------------------------
# Laziness: data is memory-mapped and read on demand, not at construction.
# ---------------------------------------------------------------------------


def test_reading_is_lazy_and_memory_mapped(tmp_path):
    arrays = {"a": np.zeros(1024, np.float32), "b": np.zeros(1024, np.float32)}
    path = _write_single(tmp_path, arrays)
    checkpoint = SafetensorsCheckpoint(str(tmp_path))
    # Change tensor "b" on disk after the headers were parsed: a reader that had
    # loaded the data up front would still return zeros.
    info = checkpoint.info("b")
    with open(path, "r+b") as f:
        f.seek(info.begin)
        f.write(np.full(1024, 7.0, np.float32).tobytes())
    got = checkpoint.read("b")
    np.testing.assert_array_equal(got, np.full(1024, 7.0, np.float32))
    # It is a view of a memory map, not a copy ...
    base = got
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base
    assert isinstance(base, np.memmap)
    # ... and read-only: nothing can write through it into the checkpoint.
    assert not got.flags.writeable


def test_each_mapping_is_released_with_its_array(tmp_path):
    # Streaming must not keep what was already written resident: once the
    # array of a tensor is dropped, its memory map goes too (a mapping cached
    # per shard would keep every page it ever touched in the process's RSS).
    import gc
    import weakref

    arrays = {f"t{i}": np.full(4096, i, np.float32) for i in range(3)}
    path = _write_single(tmp_path, arrays)
    checkpoint = SafetensorsCheckpoint(str(tmp_path))
    for name, expected in arrays.items():
        got = checkpoint.read(name)
        np.testing.assert_array_equal(got, expected)
        base = got
        while not isinstance(base, np.memmap):
            base = base.base
        mapping = base._mmap  # the mmap.mmap behind the array (numpy internal)
        # The mapping spans this tensor (plus page alignment), not the whole file.
        assert len(mapping) < os.path.getsize(path)
        ref = weakref.ref(mapping)
        del got, base, mapping
        gc.collect()
        assert ref() is None, f"the mapping of {name} outlived its array"


def test_empty_tensor_is_read_only(tmp_path):
    _write_single(tmp_path, {"e": np.zeros((0, 3), np.float32), "x": np.ones(2, np.float32)})
    got = SafetensorsCheckpoint(str(tmp_path)).read("e")
    assert got.shape == (0, 3) and got.dtype == np.float32
    assert not got.flags.writeable


# ---------------------------------------------------------------------------
# Index files that are wrong
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/tmp/outside.safetensors",
                                   "sub/../../outside.safetensors"])
def test_index_pointing_outside_the_folder_is_rejected(tmp_path, shard):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    outside = tmp_path / "outside.safetensors"  # exists, so only the location is wrong
    write_safetensors(str(outside), {"w": np.ones(2, np.float32)})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": shard}}))
    with pytest.raises(WeightsError, match="points outside the checkpoint folder"):
        SafetensorsCheckpoint(str(folder))


def test_symlinked_shard_escaping_the_folder_is_rejected(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    write_safetensors(str(tmp_path / "real.safetensors"), {"w": np.ones(2, np.float32)})
    os.symlink(tmp_path / "real.safetensors", folder / "model-1.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "model-1.safetensors"}}))
    with pytest.raises(WeightsError, match="outside"):
        SafetensorsCheckpoint(str(folder))


def test_index_naming_a_missing_shard(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(WeightsError, match="missing shard: 'model-00001-of-00002.safetensors'"):
        SafetensorsCheckpoint(str(tmp_path))


@pytest.mark.parametrize("content", ["{not json", "[]", '{"metadata": {}}',
                                     '{"weight_map": ["a.safetensors"]}',
                                     '{"weight_map": {"w": 3}}'])
def test_malformed_index(tmp_path, content):
    (tmp_path / "model.safetensors.index.json").write_text(content)
    with pytest.raises(WeightsError, match="model.safetensors.index.json is (malformed|not valid JSON)"):
        SafetensorsCheckpoint(str(tmp_path))


# ---------------------------------------------------------------------------
# Corrupt / truncated files: WeightsError naming the file, never a raw exception.
# ---------------------------------------------------------------------------


def test_truncated_data(tmp_path):
    path = _write_single(tmp_path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 10)
    with pytest.raises(WeightsError, match=r"model.safetensors is truncated: '.+' ends at byte"):
        SafetensorsCheckpoint(str(tmp_path))


@pytest.mark.parametrize("size", [0, 3, 7])
def test_shorter_than_the_length_prefix(tmp_path, size):
    (tmp_path / "model.safetensors").write_bytes(b"\x01" * size)
    with pytest.raises(WeightsError, match="model.safetensors is truncated or not a safetensors"):
        SafetensorsCheckpoint(str(tmp_path))


def test_truncated_inside_the_header(tmp_path):
    path = _write_single(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(40)
    with pytest.raises(WeightsError, match="model.safetensors is truncated or corrupt"):
        SafetensorsCheckpoint(str(tmp_path))


def test_garbage_bytes(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "model.safetensors").write_bytes(rng.integers(0, 256, 4096, np.uint8).tobytes())
    with pytest.raises(WeightsError, match="model.safetensors is (truncated or )?corrupt"):
        SafetensorsCheckpoint(str(tmp_path))


def test_garbage_header_with_plausible_length(tmp_path):
    rng = np.random.default_rng(1)
    _raw_file(tmp_path / "model.safetensors", rng.integers(0, 256, 64, np.uint8).tobytes(),
              data=b"\0" * 64)
    with pytest.raises(WeightsError, match="model.safetensors is corrupt: its header is not valid"):
        SafetensorsCheckpoint(str(tmp_path))


def test_header_length_too_big(tmp_path):
    _raw_file(tmp_path / "model.safetensors", {}, header_len=2**62)
    with pytest.raises(WeightsError, match="bad header length"):
        SafetensorsCheckpoint(str(tmp_path))


@pytest.mark.parametrize("header", [[1, 2, 3], "text", 5])
def test_header_that_is_not_an_object(tmp_path, header):
    _raw_file(tmp_path / "model.safetensors", header)
    with pytest.raises(WeightsError, match="model.safetensors is corrupt"):
        SafetensorsCheckpoint(str(tmp_path))


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}, "'w' has dtype 'Q7', which mobius"),
        ({"shape": [2], "data_offsets": [0, 8]}, "bad header entry for 'w'"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [0]}, "bad header entry for 'w'"),
        ("not an entry", "bad header entry for 'w'"),
        ({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}, "'w' spans 8 bytes, expected 12"),
        ({"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}, "'w'"),
    ],
)
def test_bad_header_entry(tmp_path, entry, message):
    _raw_file(tmp_path / "model.safetensors", {"w": entry}, data=b"\0" * 16)
    with pytest.raises(WeightsError, match=message):
        SafetensorsCheckpoint(str(tmp_path))


# ---------------------------------------------------------------------------
# dtype round trips: our writer <-> our reader <-> the safetensors library
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_dtype_round_trip(tmp_path, dtype):
    rng = np.random.default_rng(5)
    values = rng.standard_normal((3, 5)).astype(np.float32)
    values[0, :3] = [np.inf, -np.inf, 0.0]
    array = values.astype(dtype)
    path = _write_single(tmp_path, {"t": array})
    ours = SafetensorsCheckpoint(str(tmp_path)).read("t")
    theirs = safetensors_numpy.load_file(path)["t"]
    assert ours.dtype == theirs.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(ours.view(np.uint8), array.view(np.uint8))
    np.testing.assert_array_equal(theirs.view(np.uint8), array.view(np.uint8))


def test_file_truncated_after_opening_is_a_weights_error(tmp_path):
    path = _write_single(tmp_path)
    checkpoint = SafetensorsCheckpoint(str(tmp_path))
    with open(path, "r+b") as f:
        f.truncate(64)
    with pytest.raises(WeightsError, match=r"cannot read 'model.layers.0.mlp.up_proj.weight' "
                                           r"from model.safetensors"):
        checkpoint.read("model.layers.0.mlp.up_proj.weight")
