"""GatherBlockQuantized: ORT's kernel, the function body and QuantizedWeight.dequantize() agree."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx_ir.passes.common import InlinePass

from mobius.contrib.gather_block_quantized import (GatherBlockQuantizedSpec,
                                                   make_gather_block_quantized_node)
from mobius.quantize import packing
from mobius.quantize.rtn import quantize_rtn

IDS = np.array([[1, 5, 7], [48, 0, 3]], np.int64)


def _value(array, name):
    tensor = ir.tensor(array)
    return ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape),
                    const_value=tensor)


def _model(qw, bits, symmetric, blocked=False) -> ir.Model:
    """``blocked``: data is MatMulNBits' B [V, blocks, blob] as it is, scales [V, blocks, 1]."""
    ids = ir.Value(name="ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([2, 3]))
    rows, cols = qw.codes.shape
    data = packing.matmul_nbits_b(qw)
    scales = qw.scales[:, :, None] if blocked else qw.scales
    inits = [_value(data if blocked else data.reshape(rows, -1), "data"), _value(scales, "s")]
    if not symmetric:
        inits.append(_value(packing.matmul_nbits_zero_points(qw), "z"))
    graph = ir.Graph([ids], [], nodes=[], initializers=inits, opset_imports={"": 23}, name="g")
    model = ir.Model(graph, ir_version=10)
    spec = GatherBlockQuantizedSpec(rows, cols, bits, qw.block_size, not symmetric, blocked)
    node = make_gather_block_quantized_node(model, spec, [inits[0], ids, *inits[1:]], "gbq")
    graph.append(node)
    node.outputs[0].name = "y"
    node.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
    graph.outputs.append(node.outputs[0])
    return model


def _run(model):
    proto = ir.serde.serialize_model(model).SerializeToString()
    return ort.InferenceSession(proto, providers=["CPUExecutionProvider"]).run(None, {"ids": IDS})[0]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("cols,block", [(64, 32), (96, 32), (64, 16)])  # 3 blocks: odd zp count
def test_kernel_body_and_reference_agree(bits, symmetric, cols, block):
    rng = np.random.default_rng(bits + cols)
    qw = quantize_rtn(rng.standard_normal((50, cols)).astype(np.float32), bits, block, symmetric)
    expected = qw.dequantize()[IDS]
    inlined = _model(qw, bits, symmetric)
    InlinePass()(inlined)
    assert not any(n.domain == "com.microsoft" for n in inlined.graph)
    np.testing.assert_array_equal(_run(_model(qw, bits, symmetric)), expected)
    np.testing.assert_array_equal(_run(inlined), expected)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("cols,block", [(96, 32), (64, 16)])
def test_blocked_form_reads_matmul_nbits_b(bits, cols, block):
    """[V, blocks, blob] data gives [..., blocks, block] rows: the table's rows split in blocks."""
    rng = np.random.default_rng(bits * cols)
    qw = quantize_rtn(rng.standard_normal((50, cols)).astype(np.float32), bits, block, True)
    expected = qw.dequantize()[IDS].reshape(2, 3, cols // block, block)
    inlined = _model(qw, bits, True, blocked=True)
    InlinePass()(inlined)
    np.testing.assert_array_equal(_run(_model(qw, bits, True, blocked=True)), expected)
    np.testing.assert_array_equal(_run(inlined), expected)


def test_blocked_form_takes_no_zero_points():
    with pytest.raises(ValueError, match="symmetric"):
        GatherBlockQuantizedSpec(50, 64, 4, 32, zero_points=True, blocked=True)
