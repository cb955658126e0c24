"""AWQ (GEMM) unpacking against a per-element formula on the raw int32 words."""

import numpy as np
import pytest

from mobius.errors import WeightsError
from mobius.weights.awq import awq_features, unpack_awq
from mobius.weights.quantization_config import read_quantization_config
from testing.prequantized_checkpoints import Quantized, awq_config, pack_awq, quantize

FMT = read_quantization_config({"quantization_config": awq_config(32)})
#: output column (within its 8) -> the word slot AWQ stores it in
SLOT_OF_COLUMN = {0: 0, 2: 1, 4: 2, 6: 3, 1: 4, 3: 5, 5: 6, 7: 7}


def _nibble(word, column):
    return ((int(word) & 0xFFFFFFFF) >> (4 * SLOT_OF_COLUMN[column % 8])) & 15


def test_unpack_matches_the_word_formula():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((48, 96)).astype(np.float32)
    q = quantize(weight, 4, 32, sym=False)
    tensors = pack_awq(q)
    qw = unpack_awq(tensors, FMT)
    dense = qw.dequantize()
    for n, k in zip(rng.integers(0, 48, 300), rng.integers(0, 96, 300)):
        g = k // 32
        code = _nibble(tensors["qweight"][k, n // 8], n)
        zero = _nibble(tensors["qzeros"][g, n // 8], n)
        assert dense[n, k] == pytest.approx(float(tensors["scales"][g, n]) * (code - zero),
                                            abs=1e-6)
    np.testing.assert_array_equal(dense, q.weight())
    assert (qw.bits, qw.block_size, qw.g_idx) == (4, 32, None)


def test_interleave_is_not_the_identity():
    """Columns 1 and 2 of each 8 sit in slots 4 and 1: a plain unpack would swap them."""
    codes = np.zeros((8, 32), np.uint8)
    codes[1], codes[2] = 5, 9
    q = Quantized(codes, np.ones((8, 1), np.float32), np.zeros((8, 1), np.uint8),
                  np.zeros(32, np.int32))
    word = int(pack_awq(q)["qweight"][0, 0])
    assert (word >> 16) & 15 == 5 and (word >> 4) & 15 == 9
    np.testing.assert_array_equal(unpack_awq(pack_awq(q), FMT).codes, codes)


@pytest.mark.parametrize("tensor, shape, expected", [
    ("scales", (3, 40), "[3, 48]"),
    ("qzeros", (2, 6), "[3, 6]"),
])
def test_inconsistent_shapes_name_the_tensor_and_both_shapes(tensor, shape, expected):
    tensors = pack_awq(quantize(np.ones((48, 96), np.float32), 4, 32, sym=False))
    tensors[tensor] = np.zeros(shape, tensors[tensor].dtype)
    with pytest.raises(WeightsError) as info:
        awq_features("layer", {k: v.shape for k, v in tensors.items()},
                     {k: v.dtype for k, v in tensors.items()}, FMT)
    message = str(info.value)
    assert f"'layer.{tensor}'" in message and str(list(shape)) in message and expected in message
