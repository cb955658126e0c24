"""EarlyWriteback: each finished stretch of a data file goes to the kernel's writeback once."""

from __future__ import annotations

import os

import numpy as np
import onnx_ir as ir
import pytest

from mobius.package import writeback
from mobius.package.model_package import ModelPackage
from mobius.package.writeback import EarlyWriteback


@pytest.fixture
def calls(monkeypatch):
    """Every sync_file_range call as (path, offset, length, result); the real call is made."""
    real, seen = writeback._sync_file_range(), []
    assert real is not None  # Linux: the function exists

    def recording(fd, offset, length, flags):
        assert flags == writeback.SYNC_FILE_RANGE_WRITE
        result = real(fd, offset, length, flags)
        seen.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, result))
        return result

    monkeypatch.setattr(writeback, "_sync_file_range", lambda: recording)
    return seen


def test_each_written_stretch_is_handed_over_once_in_order(tmp_path, calls):
    path = str(tmp_path / "w.data")
    chunk = os.urandom(4096)
    with open(path, "wb") as f:
        wb = EarlyWriteback(path, stretch=3 * 4096)
        for i in range(10):
            wb.written(f.tell())  # before each chunk, as onnx-ir's callback
            f.write(chunk)
            f.flush()
        wb.close()
    assert [c[1:] for c in calls] == [(0, 12288, 0), (12288, 12288, 0), (24576, 12288, 0)]
    assert {c[0] for c in calls} == {path}
    with open(path, "rb") as f:
        assert f.read() == chunk * 10


def test_a_file_without_writeback_is_asked_once_and_left_alone(calls):
    wb = EarlyWriteback(os.devnull, stretch=1)  # a character device: ESPIPE
    for offset in range(1, 6):
        wb.written(offset)
    wb.close()  # returns: the worker stopped asking but still drains
    assert [(c[1], c[2]) for c in calls] == [(0, 1)] and calls[0][3] != 0


def test_nothing_is_handed_over_below_one_stretch(tmp_path, calls):
    wb = EarlyWriteback(str(tmp_path / "none.data"), stretch=1 << 20)
    wb.written(1000)
    wb.close()
    assert calls == []


def test_a_saved_package_hands_over_its_data_file_and_keeps_its_bytes(tmp_path, calls,
                                                                       monkeypatch):
    monkeypatch.setattr(writeback, "STRETCH", 1)
    rng = np.random.default_rng(3)
    weights = [rng.standard_normal(16384).astype(np.float32) for _ in range(4)]  # 64 KiB each
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([16384]))
    values, out = [], x
    for i, w in enumerate(weights):
        values.append(ir.Value(name=f"w{i}", const_value=ir.tensor(w, name=f"w{i}")))
        node = ir.node("Add", [out, values[-1]], num_outputs=1)
        out = node.outputs[0]
        nodes = [*locals().get("nodes", []), node]
    out.name = "y"
    graph = ir.Graph([x], [out], nodes=nodes, initializers=values, opset_imports={"": 21})
    folder = ModelPackage(models={"model": ir.Model(graph, ir_version=10)}).save(
        str(tmp_path / "pkg"))
    data = np.fromfile(os.path.join(folder, "model.onnx.data"), np.float32)
    np.testing.assert_array_equal(data, np.concatenate(weights))
    # Handed over before tensors 1, 2, 3: everything written so far, in order, once.
    assert [(c[1], c[2], c[3]) for c in calls] == [(0, 65536, 0), (65536, 65536, 0),
                                                   (131072, 65536, 0)]
    assert all(os.path.basename(c[0]) == "model.onnx.data" for c in calls)
