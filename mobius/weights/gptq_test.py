"""GPTQ unpacking against a per-element formula on the raw int32 words."""

import numpy as np
import pytest

from mobius.errors import WeightsError
from mobius.weights.gptq import check_g_idx, gptq_features, unpack_gptq
from mobius.weights.quantization_config import read_quantization_config
from testing.prequantized_checkpoints import gptq_config, pack_gptq, quantize


def _fmt(bits, group, fmt="gptq"):
    return read_quantization_config({"quantization_config": gptq_config(
        bits, group, checkpoint_format=fmt)})


def _element(tensors, bits, offset, k, n):
    """weight[n, k] straight from the words, one Python int at a time."""
    per, mask = 32 // bits, (1 << bits) - 1
    g = int(tensors["g_idx"][k])
    word = int(tensors["qweight"][k // per, n]) & 0xFFFFFFFF
    q = (word >> (bits * (k % per))) & mask
    zword = int(tensors["qzeros"][g, n // per]) & 0xFFFFFFFF
    zero = (((zword >> (bits * (n % per))) & mask) + offset) & mask
    return float(tensors["scales"][g, n]) * (q - zero)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("act_order", [False, True])
@pytest.mark.parametrize("fmt, offset", [("gptq", 1), ("gptq_v2", 0)])
def test_unpack_matches_the_word_formula(bits, sym, act_order, fmt, offset):
    rng = np.random.default_rng(bits + 2 * sym + 4 * act_order)
    weight = rng.standard_normal((40, 96)).astype(np.float32)
    q = quantize(weight, bits, 32, sym, rng.permutation(96) if act_order else None)
    tensors = pack_gptq(q, bits, offset)
    qw = unpack_gptq(tensors, _fmt(bits, 32, fmt))
    dense = qw.dequantize()
    for n, k in zip(rng.integers(0, 40, 300), rng.integers(0, 96, 300)):
        assert dense[n, k] == pytest.approx(_element(tensors, bits, offset, k, n), abs=1e-6)
    np.testing.assert_array_equal(dense, q.weight())
    assert (qw.zero_points is None) == sym  # symmetric zeros are the implicit midpoint
    assert (qw.g_idx is None) == (not act_order)
    assert (qw.bits, qw.block_size) == (bits, 32)


def test_v1_zero_point_zero_wraps_around():
    """v1 stores zero 0 as -1 (all ones in its bits); reading adds 1 modulo 2**bits."""
    q = quantize(np.abs(np.random.default_rng(0).standard_normal((8, 32))).astype(np.float32),
                 4, 16, sym=False)
    assert (q.zeros == 0).all()  # all-positive groups: zero point 0
    tensors = pack_gptq(q, 4, zero_offset=1)
    assert (tensors["qzeros"].view(np.uint32) == 0xFFFFFFFF).all()
    qw = unpack_gptq(tensors, _fmt(4, 16))
    np.testing.assert_array_equal(qw.zero_points, 0)
    np.testing.assert_array_equal(qw.dequantize(), q.weight())


def test_group_size_minus_one_is_one_group_over_all_inputs():
    q = quantize(np.random.default_rng(1).standard_normal((16, 64)).astype(np.float32), 4, None,
                 sym=True)
    tensors = pack_gptq(q, 4)
    fmt = _fmt(4, None)
    assert gptq_features("x", {k: v.shape for k, v in tensors.items()},
                         {k: v.dtype for k, v in tensors.items()}, fmt) == (16, 64)
    qw = unpack_gptq(tensors, fmt)
    assert (qw.block_size, qw.num_blocks) == (64, 1)
    np.testing.assert_array_equal(qw.dequantize(), q.weight())


def _features(tensors, fmt):
    return gptq_features("layer", {k: v.shape for k, v in tensors.items()},
                         {k: v.dtype for k, v in tensors.items()}, fmt)


@pytest.mark.parametrize("tensor, shape, expected", [
    ("scales", (2, 16), "[3, 16]"),
    ("qzeros", (3, 4), "[3, 2]"),
    ("g_idx", (95,), "[96]"),
])
def test_inconsistent_shapes_name_the_tensor_and_both_shapes(tensor, shape, expected):
    q = quantize(np.ones((16, 96), np.float32), 4, 32, sym=True)
    tensors = pack_gptq(q, 4)
    tensors[tensor] = np.zeros(shape, tensors[tensor].dtype)
    with pytest.raises(WeightsError) as info:
        _features(tensors, _fmt(4, 32))
    message = str(info.value)
    assert f"'layer.{tensor}'" in message and str(list(shape)) in message and expected in message


def test_float_qweight_is_refused():
    tensors = pack_gptq(quantize(np.ones((16, 64), np.float32), 4, 32, sym=True), 4)
    tensors["qweight"] = tensors["qweight"].astype(np.float32)
    with pytest.raises(WeightsError, match="'layer.qweight' is float32; expected int32"):
        _features(tensors, _fmt(4, 32))


def test_group_index_out_of_range_is_refused():
    with pytest.raises(WeightsError, match="'x.g_idx' has group indices in \\[0, 3\\]"):
        check_g_idx("x.g_idx", np.array([0, 1, 2, 3], np.int32), groups=3)
