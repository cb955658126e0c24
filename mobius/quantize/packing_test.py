"""Packed forms run in onnxruntime and reproduce QuantizedWeight.dequantize()."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from mobius.quantize import packing
from mobius.quantize.rtn import quantize_rtn

M = 3


def _run(nodes, inits, k, n, opsets):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", 1, [M, k])],
                              [helper.make_tensor_value_info("Y", 1, [M, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    options = ort.SessionOptions()
    # ORT fuses DequantizeLinear+MatMul into MatMulNBits at accuracy level 4 unless told
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    a = np.random.default_rng(0).standard_normal((M, k)).astype(np.float32)
    return a, session.run(None, {"A": a})[0]


def _tensor(array, name):
    return ir.serde.serialize_tensor(ir.tensor(array, name=name))


CASES = [(b, s, blk) for b in (4, 8) for s in (True, False) for blk in (16, 32)]


@pytest.mark.parametrize("bits,symmetric,block", CASES)
def test_matmul_nbits(bits, symmetric, block):
    k, n = 80, 48  # K not a multiple of 32: the last block is padded
    qw = quantize_rtn(np.random.default_rng(bits).standard_normal((n, k)), bits, block, symmetric)
    inits = [_tensor(packing.matmul_nbits_b(qw), "B"), _tensor(qw.scales, "S")]
    zeros = packing.matmul_nbits_zero_points(qw)
    if zeros is not None:
        inits.append(_tensor(zeros, "Z"))
    node = helper.make_node("MatMulNBits", ["A", "B", "S"] + ["Z"] * (zeros is not None), ["Y"],
                            domain="com.microsoft", K=k, N=n, bits=bits, block_size=block,
                            accuracy_level=1)
    a, y = _run([node], inits, k, n, [("", 21), ("com.microsoft", 1)])
    np.testing.assert_allclose(y, a @ qw.dequantize().T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bits,symmetric,block", CASES)
def test_blocked_dequantize_linear(bits, symmetric, block):
    k, n = 80, 48
    qw = quantize_rtn(np.random.default_rng(bits).standard_normal((n, k)), bits, block, symmetric)
    inits = [_tensor(packing.dequantize_linear_codes(qw), "C"),
             _tensor(np.ascontiguousarray(qw.scales.T), "S")]
    zeros = packing.dequantize_linear_zero_points(qw)
    if zeros is not None:
        inits.append(_tensor(zeros, "Z"))
    nodes = [helper.make_node("DequantizeLinear", ["C", "S"] + ["Z"] * (zeros is not None), ["W"],
                              axis=0, block_size=block),
             helper.make_node("MatMul", ["A", "W"], ["Y"])]
    a, y = _run(nodes, inits, k, n, [("", 21)])
    np.testing.assert_allclose(y, a @ qw.dequantize().T, rtol=1e-5, atol=1e-5)


def test_nibbles_low_first():
    packed = packing.pack_nibbles(np.array([[1, 2, 15, 0]], np.uint8))
    assert packed.tolist() == [[0x21, 0x0F]]
