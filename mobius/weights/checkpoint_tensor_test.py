"""CheckpointTensor: unchanged bytes are copied file to file (never read into the
process); transformed or converted tensors are read; both save exactly."""

from __future__ import annotations

import errno
import os

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import numpy_helper
from onnxscript import nn

from mobius.components.weight import Weight, transpose
from mobius.context import build_context
from mobius.errors import WeightsError
from mobius.weights import checkpoint_tensor
from mobius.weights.attach import attach_weights
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors

RNG = np.random.default_rng(7)
ARRAYS = {
    "same": RNG.standard_normal((37, 6)).astype(np.float32),  # stored as is
    "transposed": RNG.standard_normal((5, 6)).astype(np.float32),
    "half": RNG.standard_normal(29).astype(np.float16),  # converted to float32
}


class _Module(nn.Module):
    def __init__(self):
        super().__init__()
        self.same = Weight([37, 6])
        self.transposed = Weight([6, 5], checkpoint_shape=[5, 6], transform=transpose)
        self.half = Weight([29])


class _CountingCheckpoint(SafetensorsCheckpoint):
    """The real checkpoint, remembering which tensors were read into memory."""

    def __init__(self, folder):
        super().__init__(folder)
        self.reads = []

    def read(self, name):
        self.reads.append(name)
        return super().read(name)


def _save(tmp_path):
    folder = tmp_path / "ckpt"
    os.makedirs(folder)
    write_safetensors(str(folder / "model.safetensors"), ARRAYS)
    checkpoint = _CountingCheckpoint(str(folder))
    with build_context(None, ir.DataType.FLOAT):
        module = _Module()
    attach_weights(module, checkpoint)
    params = [module.same, module.transposed, module.half]
    outputs = []
    nodes = []
    for i, param in enumerate(params):
        param.name = param.name or f"p{i}"
        nodes.append(ir.Node("", "Identity", [param], outputs=[ir.Value(name=f"out{i}")]))
        outputs.append(nodes[-1].outputs[0])
    graph = ir.Graph([], outputs, nodes=nodes, initializers=params, opset_imports={"": 23})
    path = str(tmp_path / "model.onnx")
    ir.save(ir.Model(graph, ir_version=10), path, external_data="model.onnx.data")
    saved = onnx.load(path)
    return checkpoint, params, {t.name: numpy_helper.to_array(t) for t in saved.graph.initializer}


def test_unchanged_bytes_are_copied_without_reading_them(tmp_path):
    checkpoint, params, saved = _save(tmp_path)
    same, transposed, half = params
    assert same.const_value.copy_from is not None
    assert transposed.const_value.copy_from is None and half.const_value.copy_from is None
    assert sorted(checkpoint.reads) == ["half", "transposed"]  # "same" never entered memory
    np.testing.assert_array_equal(saved[same.name], ARRAYS["same"])
    np.testing.assert_array_equal(saved[transposed.name], ARRAYS["transposed"].T)
    np.testing.assert_array_equal(saved[half.name], ARRAYS["half"].astype(np.float32))


def test_falls_back_to_read_and_write_where_the_kernel_cannot_copy(tmp_path, monkeypatch):
    def cannot(*args):
        raise OSError(errno.EXDEV, "cross-device")

    monkeypatch.setattr(checkpoint_tensor.os, "copy_file_range", cannot)
    monkeypatch.setattr(checkpoint_tensor, "_CHUNK", 100)  # several partial reads
    checkpoint, params, saved = _save(tmp_path)
    assert "same" not in checkpoint.reads
    np.testing.assert_array_equal(saved[params[0].name], ARRAYS["same"])


def test_a_file_that_shrank_is_a_clear_error(tmp_path):
    path = tmp_path / "model.safetensors"
    write_safetensors(str(path), {"same": ARRAYS["same"]})
    info = SafetensorsCheckpoint(str(tmp_path)).info("same")
    os.truncate(path, info.end - 8)
    with open(tmp_path / "out", "wb") as out, pytest.raises(WeightsError, match="ended early"):
        checkpoint_tensor.copy_range(info, out.fileno(), 0)
