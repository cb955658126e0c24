"""attach_weights: an unread checkpoint tensor is an error unless declared ignorable."""

from __future__ import annotations

import os

import numpy as np
import onnx_ir as ir
import pytest
from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.weight import Sources, Weight
from mobius.context import build_context
from mobius.errors import WeightsError
from mobius.weights.attach import IgnoredTensors, attach_weights
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors


def _checkpoint(folder, extra: tuple[str, ...]) -> SafetensorsCheckpoint:
    rng = np.random.default_rng(0)
    arrays = {"weight": rng.standard_normal((3, 4)).astype(np.float32),
              "bias": rng.standard_normal(3).astype(np.float32)}
    arrays.update({name: np.ones(2, np.float32) for name in extra})
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"), arrays)
    return SafetensorsCheckpoint(str(folder))


def _linear() -> Linear:
    with build_context(None, ir.DataType.FLOAT):
        return Linear(4, 3, bias=True)


def test_every_tensor_read_attaches(tmp_path):
    linear = _linear()
    attach_weights(linear, _checkpoint(tmp_path, ()))
    assert linear.bias.const_value is not None


def test_an_unread_tensor_is_an_error(tmp_path):
    with pytest.raises(WeightsError, match=r"does not read 1 checkpoint tensor.*'extra.scale'"):
        attach_weights(_linear(), _checkpoint(tmp_path, ("extra.scale",)))


def test_a_declared_tensor_may_stay_unread(tmp_path, caplog):
    ignorable = (IgnoredTensors(r"rotary\.inv_freq", "recomputed from the config"),)
    with caplog.at_level("INFO", logger="mobius.weights.attach"):
        attach_weights(_linear(), _checkpoint(tmp_path, ("rotary.inv_freq",)),
                       ignorable=ignorable)
    assert "rotary.inv_freq" in caplog.text


def test_the_pattern_matches_the_whole_name(tmp_path):
    """A declaration for ``rotary.inv_freq`` does not cover ``rotary.inv_freq_extra``."""
    ignorable = (IgnoredTensors(r"rotary\.inv_freq", "recomputed from the config"),)
    with pytest.raises(WeightsError, match="inv_freq_extra"):
        attach_weights(_linear(), _checkpoint(tmp_path, ("rotary.inv_freq_extra",)),
                       ignorable=ignorable)


class _Normed(nn.Module):
    """A parameter computed from two sibling tensors, under a submodule and a prefix."""

    def __init__(self):
        super().__init__()
        with build_context(None, ir.DataType.FLOAT):
            self.weight = Weight([2, 3], sources=Sources((("a", "b"), ("old_a", "old_b")),
                                                         ((2, 1), (2, 3)), np.multiply))


class _Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = _Normed()


def _write(folder, arrays) -> SafetensorsCheckpoint:
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"), arrays)
    return SafetensorsCheckpoint(str(folder))


@pytest.mark.parametrize("spelling", [("a", "b"), ("old_a", "old_b")])
def test_sources_combine_the_first_spelling_present(tmp_path, spelling):
    a, b = np.full((2, 1), 2.0, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    holder = _Holder()
    attach_weights(holder, _write(tmp_path, {f"model.conv.{spelling[0]}": a,
                                             f"model.conv.{spelling[1]}": b}),
                   prefixes=("", "model."))
    np.testing.assert_array_equal(holder.conv.weight.const_value.numpy(), a * b)


@pytest.mark.parametrize("arrays,message", [
    ({"conv.a": np.ones((2, 1), np.float32)}, "missing tensor 'conv.b'"),
    ({"conv.a": np.ones((2, 2), np.float32), "conv.b": np.ones((2, 3), np.float32)},
     r"'conv.a' has shape \[2, 2\]"),
])
def test_sources_check_names_and_shapes(tmp_path, arrays, message):
    with pytest.raises(WeightsError, match=message):
        attach_weights(_Holder(), _write(tmp_path, arrays))


class _Rows(nn.Module):
    """Rows [2, 6) of a bf16 checkpoint tensor as float32, and a transposed parameter."""

    def __init__(self):
        super().__init__()
        with build_context(None, ir.DataType.FLOAT):
            self.part = Weight([4, 3], checkpoint_shape=[8, 3], checkpoint_rows=(2, 6))
            self.flipped = Weight([3, 8], checkpoint_shape=[8, 3], transform=np.transpose)


def test_a_tensor_as_stored_reads_any_band_of_its_rows_alone(tmp_path):
    import ml_dtypes

    stored = np.random.default_rng(5).standard_normal((8, 3)).astype(ml_dtypes.bfloat16)
    module = _Rows()
    attach_weights(module, _write(tmp_path, {"part": stored, "flipped": stored}))
    part = module.part.const_value
    whole = part.numpy()
    np.testing.assert_array_equal(whole, stored[2:6].astype(np.float32))
    for start, stop in ((0, 4), (1, 3), (3, 4)):
        band = part.read_rows(start, stop)
        assert band.dtype == np.float32
        np.testing.assert_array_equal(band, whole[start:stop])
    assert module.flipped.const_value.read_rows is None  # transposed: its rows are not stored


def test_nan_in_several_bands_warns_once(tmp_path, caplog):
    stored = np.ones((8, 3), np.float32)
    stored[2, 0] = stored[5, 1] = np.nan
    module = _Rows()
    attach_weights(module, _write(tmp_path, {"part": stored, "flipped": stored}))
    with caplog.at_level("WARNING", logger="mobius.weights.dtypes"):
        for start in range(4):
            module.part.const_value.read_rows(start, start + 1)
    assert caplog.text.count("'part' holds NaN or Inf") == 1
