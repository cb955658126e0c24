"""components.weight.transpose: the blocked copy equals ``array.T``, C-contiguous."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mobius.components import weight
from mobius.components.weight import transpose


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8])
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (3, 7), (33, 17), (0, 5), (5, 0), (256, 40)])
def test_transpose_matches_numpy(shape, dtype):
    array = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    got = transpose(array)
    want = np.ascontiguousarray(array.T)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_transpose_of_read_only_memmap(tmp_path):
    path = str(tmp_path / "w.bin")
    data = np.arange(40 * 9, dtype=np.float32).reshape(40, 9)
    data.tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="r", shape=(40, 9))
    got = transpose(mapped)
    assert type(got) is np.ndarray  # a copy, not a view of the checkpoint file
    np.testing.assert_array_equal(got, data.T)


def test_transpose_of_non_2d_falls_back():
    array = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(transpose(array), array)


def test_transpose_into_a_strided_view():
    """``out=``: the columns of a wider array (a packed weight's part), nothing else touched."""
    array = np.random.default_rng(1).standard_normal((40, 2100)).astype(np.float32)
    wide = np.zeros((2100, 50), np.float32)
    transpose(array, out=wide[:, 5:45])
    np.testing.assert_array_equal(wide[:, 5:45], array.T)
    assert not wide[:, :5].any() and not wide[:, 45:].any()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_transpose_on_threads_equals_numpy(monkeypatch, dtype):
    """Runs of whole tiles on 3 threads (a ragged last run), converting f32 as it copies."""
    monkeypatch.setattr(weight, "TRANSPOSE_THREADS", 3)
    monkeypatch.setattr(weight, "_THREAD_ELEMENTS", 64)
    array = np.random.default_rng(2).standard_normal((83, 2100)).astype(np.float32)
    out = np.full((2100, 83), -1, dtype)
    transpose(array, out=out)
    np.testing.assert_array_equal(out, array.T.astype(dtype))
