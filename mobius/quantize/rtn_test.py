"""RTN: ``minmax`` reconstructs every element within half a step, ``mse`` never does a
block worse than ``minmax``; all bit / block / symmetry cases."""

import itertools

import numpy as np
import pytest

from mobius.errors import WeightsError
from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.quantize import rtn
from mobius.quantize.rtn import quantize_rtn


def _reference_step(qw: QuantizedWeight) -> np.ndarray:
    return np.abs(qw.scales[:, qw.block_of_channel()])


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [16, 32, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_reconstruction_within_half_a_step(bits, block, symmetric):
    weight = _weight(bits * block + symmetric)
    qw = quantize_rtn(weight, bits, block, symmetric, rtn.MINMAX)
    assert qw.codes.max() < 2**bits
    assert (qw.zero_points is None) == symmetric
    error = np.abs(qw.dequantize() - weight) / _reference_step(qw)
    assert error.max() <= 0.5 + 1e-4


def _weight(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((37, 200)).astype(np.float32) * rng.uniform(0.01, 3, (37, 1))
    weight[3, :] += 2.5  # an all-positive row: asymmetric blocks must still cover it
    return weight


def _block_errors(qw: QuantizedWeight, weight: np.ndarray) -> np.ndarray:
    """Squared reconstruction error per (row, block)."""
    error = (qw.dequantize() - weight) ** 2
    padded = np.zeros((weight.shape[0], qw.num_blocks * qw.block_size))
    padded[:, : weight.shape[1]] = error
    return padded.reshape(weight.shape[0], qw.num_blocks, -1).sum(-1)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [16, 32, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_mse_never_worse_than_minmax_per_block(bits, block, symmetric):
    """The exact span is one of mse's candidates: no block gets worse, and on Gaussian
    weights clipping the extremes pays overall at 4 bits (asymmetric: over 3%)."""
    weight = _weight(100 + bits * block + symmetric)
    chosen = _block_errors(quantize_rtn(weight, bits, block, symmetric, rtn.MSE), weight)
    exact = _block_errors(quantize_rtn(weight, bits, block, symmetric, rtn.MINMAX), weight)
    assert (chosen <= exact * (1 + 1e-6) + 1e-12).all()
    if bits == 4:  # at 8 bits a clipped extreme costs more than the finer step gains
        assert chosen.sum() < (0.97 if not symmetric and block >= 32 else 1) * exact.sum()


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match="'gptq'.*minmax, mse"):
        quantize_rtn(np.ones((4, 32), np.float32), 4, 32, True, "gptq")


@pytest.mark.parametrize("method", rtn.METHODS)
def test_exact_grid_is_reproduced(method):
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 16, (8, 64)).astype(np.uint8)
    codes[:, ::32] = 15  # each block reaches both ends of the grid
    codes[:, 1::32] = 0
    zeros = rng.integers(0, 16, (8, 2)).astype(np.uint8)
    scales = rng.uniform(0.01, 1, (8, 2)).astype(np.float32)
    exact = QuantizedWeight(codes, scales, zeros, 4, 32).dequantize()
    again = quantize_rtn(exact, 4, 32, False, method)
    np.testing.assert_allclose(again.dequantize(), exact, rtol=0, atol=1e-6)


def test_zero_block_keeps_zero():
    weight = np.zeros((2, 32), np.float32)
    weight[1, :16] = 1.0
    for symmetric, method in itertools.product((True, False), rtn.METHODS):
        qw = quantize_rtn(weight, 4, 16, symmetric, method)
        np.testing.assert_allclose(qw.dequantize(), weight, atol=1e-7)


def test_bad_shapes_are_named():
    with pytest.raises(WeightsError, match="scales have shape"):
        QuantizedWeight(np.zeros((4, 64), np.uint8), np.ones((4, 3), np.float32), None, 4, 32)
    with pytest.raises(WeightsError, match="bits 3"):
        QuantizedWeight(np.zeros((4, 64), np.uint8), np.ones((4, 2), np.float32), None, 3, 32)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("method", rtn.METHODS)
def test_chunks_on_threads_give_the_serial_result(monkeypatch, symmetric, method):
    """Small chunks (many per weight, a ragged last one) quantized on threads write
    exactly what one thread writes (and, minmax, stay within half a step)."""
    monkeypatch.setattr(rtn, "_CHUNK_ELEMENTS", 3 * 32 * 96)  # 3 blocks of 32 rows per chunk
    rng = np.random.default_rng(7)
    weight = rng.standard_normal((96, 32 * 20 + 5)).astype(np.float32)  # [N, K]: 21 blocks
    results = {}
    for threads in (1, 3):
        monkeypatch.setattr(rtn, "THREADS", threads)
        results[threads] = quantize_rtn(weight, 4, 32, symmetric, method)
    serial, threaded = results[1], results[3]
    np.testing.assert_array_equal(threaded.codes, serial.codes)
    np.testing.assert_array_equal(threaded.scales, serial.scales)
    if not symmetric:
        np.testing.assert_array_equal(threaded.zero_points, serial.zero_points)
    if method == rtn.MINMAX:
        error = np.abs(threaded.dequantize() - weight) / _reference_step(threaded)
        assert error.max() <= 0.5 + 1e-4


def test_a_chunk_error_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(rtn, "_CHUNK_ELEMENTS", 32 * 8)
    monkeypatch.setattr(rtn, "THREADS", 2)

    def broken(blocks, bits, method):
        raise FloatingPointError("chunk failed")

    monkeypatch.setattr(rtn, "_symmetric", broken)
    with pytest.raises(FloatingPointError, match="chunk failed"):
        quantize_rtn(np.ones((8, 128), np.float32), 4, 32, True)


class _Bands:
    """A [N, K] tensor that only gives bands of rows (its whole load is an error)."""

    def __init__(self, array):
        self.array, self.shape, self.bands = array, array.shape, []

    def read_rows(self, start, stop):
        self.bands.append((start, stop))
        return self.array[start:stop]

    def numpy(self):
        raise AssertionError("the whole tensor was loaded")


@pytest.mark.parametrize("symmetric", [True, False])
def test_a_tensor_read_in_bands_of_rows_quantizes_like_the_whole(monkeypatch, symmetric):
    """With the default method (mse)."""
    monkeypatch.setattr(rtn, "_BAND_ELEMENTS", 10 * 200)  # 10 rows of K = 200 per band
    weight = np.random.default_rng(9).standard_normal((37, 200)).astype(np.float32)
    source = _Bands(weight)
    banded = rtn.quantize_rtn_rows(source, 4, 32, symmetric)
    whole = quantize_rtn(weight, 4, 32, symmetric)
    assert source.bands == [(0, 10), (10, 20), (20, 30), (30, 37)]
    np.testing.assert_array_equal(banded.codes, whole.codes)
    np.testing.assert_array_equal(banded.scales, whole.scales)
    if not symmetric:
        np.testing.assert_array_equal(banded.zero_points, whole.zero_points)
