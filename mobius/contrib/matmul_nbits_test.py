"""MatMulNBits' function body (what EPs without the kernel inline) equals ORT's kernel."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx_ir.passes.common import InlinePass

from mobius.contrib.matmul_nbits import MatMulNBitsSpec, make_matmul_nbits_node
from mobius.quantize import packing
from mobius.quantize.rtn import quantize_rtn


def _model(spec: MatMulNBitsSpec, qw) -> ir.Model:
    a = ir.Value(name="A", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3, spec.k]))
    arrays = [packing.matmul_nbits_b(qw), qw.scales]
    if spec.zero_points:
        arrays.append(packing.matmul_nbits_zero_points(qw))
    inits = [ir.Value(name=f"w{i}", type=ir.TensorType(ir.tensor(x).dtype),
                      shape=ir.Shape(x.shape), const_value=ir.tensor(x))
             for i, x in enumerate(arrays)]
    graph = ir.Graph([a], [], nodes=[], initializers=inits, opset_imports={"": 23},
                     name="g")
    model = ir.Model(graph, ir_version=10)
    node = make_matmul_nbits_node(model, spec, [a, *inits], "mm")
    graph.append(node)
    node.outputs[0].name = "Y"
    node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    graph.outputs.append(node.outputs[0])
    return model


def _run(model: ir.Model, a: np.ndarray) -> np.ndarray:
    proto = ir.serde.serialize_model(model)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"A": a})[0]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("k,block", [(64, 32), (100, 32), (40, 16), (72, 128)])
def test_body_matches_kernel(bits, symmetric, k, block):
    n = 24
    rng = np.random.default_rng(k + bits)
    qw = quantize_rtn(rng.standard_normal((n, k)).astype(np.float32), bits, block, symmetric)
    spec = MatMulNBitsSpec(k, n, bits, block, accuracy_level=1, zero_points=not symmetric)
    a = rng.standard_normal((2, 3, k)).astype(np.float32)
    kernel = _run(_model(spec, qw), a)
    inlined = _model(spec, qw)
    InlinePass()(inlined)
    assert not any(node.domain == "com.microsoft" for node in inlined.graph)
    body = _run(inlined, a)
    expected = a @ qw.dequantize().T
    np.testing.assert_allclose(kernel, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(body, expected, rtol=1e-5, atol=1e-5)
