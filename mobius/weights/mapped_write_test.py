"""Transformed checkpoint tensors are computed straight into the mapped data file:
the same bytes at the same offsets as the write() path, no package left by a
failure, and a full disk is an error (not SIGBUS)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnxscript import nn

from mobius.components.weight import Weight, transpose
from mobius.context import build_context
from mobius.errors import WeightsError
from mobius.package.model_package import ModelPackage
from mobius.weights import mapped_write
from mobius.weights.attach import attach_weights
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors
from testing.small_disk import run_on_small_disk

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
F32, F16 = ir.DataType.FLOAT, ir.DataType.FLOAT16


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {  # odd sizes: the tensors after the first start mid-page
        "odd": rng.standard_normal((25, 7)).astype(np.float16),  # converted to f32
        "big": rng.standard_normal((300, 37)).astype(np.float32),  # transposed, several pages
        "half": rng.standard_normal((33, 29)).astype(np.float32),  # transposed into f16
        "rows": rng.standard_normal((40, 9)).astype(np.float32),  # any other transform
        "same": rng.standard_normal(113).astype(np.float32),  # copied file to file
        "last": rng.standard_normal((64, 48)).astype(np.float32),  # transposed
    }


class _Module(nn.Module):
    def __init__(self):
        super().__init__()
        self.odd = Weight([25, 7], dtype=F32)
        self.big = Weight([37, 300], checkpoint_shape=[300, 37], transform=transpose)
        self.half = Weight([29, 33], checkpoint_shape=[33, 29], transform=transpose, dtype=F16)
        self.rows = Weight([9, 20], checkpoint_shape=[40, 9], transform=lambda a: a[10:30].T)
        self.same = Weight([113])
        self.last = Weight([48, 64], checkpoint_shape=[64, 48], transform=transpose)


def _model(checkpoint_folder: str) -> ir.Model:
    with build_context(None, F32):
        module = _Module()
    attach_weights(module, SafetensorsCheckpoint(checkpoint_folder))
    params = [module.odd, module.big, module.half, module.rows, module.same, module.last]
    nodes = []
    for i, param in enumerate(params):
        param.name = f"w{i}"
        nodes.append(ir.Node("", "Identity", [param], outputs=[ir.Value(name=f"out{i}")]))
    graph = ir.Graph([], [n.outputs[0] for n in nodes], nodes=nodes, initializers=params,
                     opset_imports={"": 23})
    return ir.Model(graph, ir_version=10)


def _checkpoint(folder) -> str:
    os.makedirs(folder)
    write_safetensors(os.path.join(folder, "model.safetensors"), _arrays())
    return str(folder)


def save_package(checkpoint_folder: str, out: str) -> None:
    """The child of the full-disk test: a package of ``_Module`` saved to ``out``."""
    ModelPackage(models={"model": _model(checkpoint_folder)}).save(out)


def _save(tmp_path, name: str) -> str:
    out = str(tmp_path / name)
    ModelPackage(models={"model": _model(str(tmp_path / "ckpt"))}).save(out)
    return out


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


@pytest.fixture
def spy(monkeypatch):
    """The sizes of the tensors that went through the mapping (onnx-ir keeps tensors of
    256 bytes or less in model.onnx; every tensor here is larger)."""
    mapped: list[int] = []
    write_mapped = mapped_write.write_mapped

    def counted(file, nbytes, fill):
        ok = write_mapped(file, nbytes, fill)
        if ok:
            mapped.append(nbytes)
        return ok

    monkeypatch.setattr(mapped_write, "write_mapped", counted)
    return mapped


def test_mapped_package_equals_the_written_one(tmp_path, monkeypatch, spy):
    _checkpoint(tmp_path / "ckpt")
    mapped_out = _save(tmp_path, "mapped")
    assert sorted(spy) == sorted([25 * 7 * 4, 300 * 37 * 4, 33 * 29 * 2, 20 * 9 * 4, 64 * 48 * 4])
    monkeypatch.setattr(mapped_write, "write_mapped", lambda *args: False)
    written_out = _save(tmp_path, "written")
    for name in ("model.onnx", "model.onnx.data"):
        assert _read(os.path.join(mapped_out, name)) == _read(os.path.join(written_out, name))
    saved = onnx.load(os.path.join(mapped_out, "model.onnx"), load_external_data=False)
    offsets = [int(next((e.value for e in t.external_data if e.key == "offset"), 0))
               for t in saved.graph.initializer]
    assert len(offsets) == 6 and all(offset % 4096 for offset in offsets[1:])  # mid-page
    arrays = _arrays()
    want = [arrays["odd"].astype(np.float32), arrays["big"].T, arrays["half"].T.astype(np.float16),
            arrays["rows"][10:30].T, arrays["same"], arrays["last"].T]
    got = {t.name: onnx.numpy_helper.to_array(t, mapped_out) for t in saved.graph.initializer}
    for i, expected in enumerate(want):
        assert got[f"w{i}"].dtype == expected.dtype
        np.testing.assert_array_equal(got[f"w{i}"], expected)


def test_written_as_before_where_the_kernel_cannot_populate(tmp_path, monkeypatch, spy):
    _checkpoint(tmp_path / "ckpt")
    reference = _read(os.path.join(_save(tmp_path, "mapped"), "model.onnx.data"))
    monkeypatch.setattr(mapped_write, "MADV_POPULATE_WRITE", 0x7FFF)  # EINVAL, as before 5.14
    spy.clear()
    out = _save(tmp_path, "fallback")
    assert spy == []
    assert _read(os.path.join(out, "model.onnx.data")) == reference


def test_a_failure_mid_write_leaves_no_package(tmp_path, spy):
    """The checkpoint loses its last tensor after the graph was built: the data file
    is half written (mapped tensors before it) when reading it fails."""
    folder = _checkpoint(tmp_path / "ckpt")
    model = _model(folder)
    info = SafetensorsCheckpoint(folder).info("last")
    os.truncate(os.path.join(folder, "model.safetensors"), info.begin + 8)
    with pytest.raises(WeightsError, match="'last'"):
        ModelPackage(models={"model": model}).save(str(tmp_path / "out"))
    assert len(spy) == 4  # everything before the last tensor went through the mapping
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no package, no staging folder


def test_a_full_disk_is_an_error_not_a_crash(tmp_path):
    """A 32 KiB tmpfs (private user + mount namespace) cannot hold the 44 KiB tensor:
    populating its mapping fails, so it is written with write(), which raises ENOSPC."""
    folder = _checkpoint(tmp_path / "ckpt")
    disk = tmp_path / "disk"
    child = (f"import sys; sys.path.insert(0, {_ROOT!r}); "
             f"from mobius.weights.mapped_write_test import save_package; "
             f"save_package({folder!r}, {str(disk / 'out')!r})")
    stdout, stderr = run_on_small_disk(str(disk), "32k", child)
    assert f"OutputError: no space left on the device holding {disk}" in stderr
    assert stdout.strip() == "rc=1 left:"  # an error (not SIGBUS, 135), nothing left
