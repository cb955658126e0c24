"""Preallocation: a data file's final size is reserved on disk before its first byte, what is
not used is released, and a disk too small says so before anything is read or written."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx_ir as ir

from mobius.package.model_package import ModelPackage
from mobius.package.preallocate import Preallocation
from testing.small_disk import run_on_small_disk

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BLOCK = 4096


def _allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def _package(weights: list, on_load=None) -> ModelPackage:
    """A chain of Adds, one per weight; each weight a lazy tensor calling ``on_load(i)``."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([len(weights[0])]))
    values, nodes, out = [], [], x
    for i, w in enumerate(weights):
        def load(i=i, w=w):
            if on_load is not None:
                on_load(i)
            return ir.tensor(w, name=f"w{i}")

        values.append(ir.Value(name=f"w{i}", const_value=ir.LazyTensor(
            load, ir.DataType.FLOAT, ir.Shape(w.shape), name=f"w{i}")))
        nodes.append(ir.node("Add", [out, values[-1]], num_outputs=1))
        out = nodes[-1].outputs[0]
    out.name = "y"
    graph = ir.Graph([x], [out], nodes=nodes, initializers=values, opset_imports={"": 21})
    return ModelPackage(models={"model": ir.Model(graph, ir_version=10)})


def test_the_whole_data_file_is_reserved_before_its_first_tensor(tmp_path):
    weights = [np.random.default_rng(i).standard_normal(300_000).astype(np.float32)
               for i in range(4)]  # 1.2 MB each
    total = sum(w.nbytes for w in weights)
    seen = []

    def on_load(i):  # the staged data file, as its tensor i is about to be written
        [staged] = glob.glob(str(tmp_path / ".pkg*" / ".model.onnx.data.*" / "model.onnx.data"))
        seen.append((i, os.path.getsize(staged), _allocated(staged)))

    folder = _package(weights, on_load).save(str(tmp_path / "pkg"))
    assert seen[0] == (0, 0, seen[0][2]) and seen[0][2] >= total  # reserved, nothing written
    assert all(allocated >= total for _, _, allocated in seen)
    data = os.path.join(folder, "model.onnx.data")
    np.testing.assert_array_equal(np.fromfile(data, np.float32), np.concatenate(weights))
    assert _allocated(data) <= total + _BLOCK  # nothing reserved is left past the end


def test_blocks_not_written_are_released(tmp_path):
    path = str(tmp_path / "x.data")
    with open(path, "wb") as f:
        reserved = Preallocation(path, 8 << 20)
        reserved.started()
        assert _allocated(path) >= 8 << 20 and os.path.getsize(path) == 0  # size unchanged
        f.write(b"x" * 5000)
    reserved.close()
    assert os.path.getsize(path) == 5000 and _allocated(path) <= 2 * _BLOCK


_CHILD = """
import os, sys
sys.path.insert(0, {root!r})
import numpy as np
from mobius.package.preallocate_test import _package
weights = [np.ones(50_000, np.float32) for _ in range(3)]  # 600 KB: more than the disk
_package(weights, lambda i: print("loaded", i, flush=True)).save(sys.argv[1])
"""


def test_a_disk_too_small_fails_before_any_tensor_is_read(tmp_path):
    """A 256 KiB tmpfs (private user + mount namespace) cannot hold the 600 KB data file."""
    disk = tmp_path / "disk"
    stdout, stderr = run_on_small_disk(str(disk), "256k", _CHILD.format(root=_ROOT),
                                       f"{disk}/out")
    assert "OutputError: no space left on the device" in stderr, stderr
    assert "loaded" not in stdout  # failed at the reservation, not after writing
    assert stdout.strip() == "rc=1 left:"  # the staging folder was removed
