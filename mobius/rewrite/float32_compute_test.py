"""Float32Compute: bf16 storage + f32 compute for EPs without bf16 kernels."""

import ml_dtypes
import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius.builder import build
from mobius.ep.registry import get_ep
from mobius.rewrite.float32_compute import Float32Compute
from mobius.rewrite.rule import RuleContext
from testing import parity
from testing.hf_checkpoints import seed0_checkpoint

#: this test's Bazel target, read by //tools:rewrite_rules (data: the seed-0 tiny-llama checkpoint)
TEST_TARGET = {"size": "medium", "data": ["//testing/tiny:hf"]}

BF16 = ir.DataType.BFLOAT16


def _tiny_graph(dtype: ir.DataType) -> ir.Model:
    """y = Where(c, x * w, const) with a bf16 weight, bf16 input/output."""
    x = ir.Value(name="x", type=ir.TensorType(dtype), shape=ir.Shape([2, 3]))
    c = ir.Value(name="c", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([2, 3]))
    w = ir.Value(name="w", type=ir.TensorType(dtype), shape=ir.Shape([3]),
                 const_value=ir.tensor(np.array([1.5, -2.0, 0.25], dtype=ml_dtypes.bfloat16)))
    mul = ir.node("Mul", [x, w])
    const = ir.node("Constant", [], attributes={
        "value": ir.tensor(np.array(-3.0, dtype=ml_dtypes.bfloat16))})
    where = ir.node("Where", [c, mul.outputs[0], const.outputs[0]])
    where.outputs[0].name = "y"
    where.outputs[0].type = ir.TensorType(dtype)
    for node in (mul, const):
        node.outputs[0].type = ir.TensorType(dtype)
    graph = ir.Graph([x, c], [where.outputs[0]], nodes=[mul, const, where],
                     initializers=[w], opset_imports={"": 23})
    return ir.Model(graph, ir_version=10)


def test_bf16_graph_computes_in_f32_and_keeps_bf16_io():
    model = _tiny_graph(BF16)
    ctx = RuleContext(get_ep("cpu"), BF16, "decoder")
    assert Float32Compute().applies(ctx)
    assert Float32Compute().apply(model, ctx) > 0
    assert model.graph.inputs[0].type.dtype == BF16
    assert model.graph.outputs[0].type.dtype == BF16 and model.graph.outputs[0].name == "y"
    assert model.graph.initializers["w"].type.dtype == BF16  # stored as bf16
    kinds = [(n.op_type, n.outputs[0].type.dtype) for n in model.graph]
    assert ("Mul", ir.DataType.FLOAT) in kinds and ("Where", ir.DataType.FLOAT) in kinds
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString())
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=ml_dtypes.bfloat16)
    c = np.array([[True, False, True], [False, True, True]])
    (y,) = parity.run_session(session, {"x": x, "c": c})
    expected = np.where(c, x.astype(np.float32) * np.array([1.5, -2.0, 0.25], np.float32), -3.0)
    np.testing.assert_array_equal(y.astype(np.float32), expected)


@pytest.mark.parametrize("ep, dtype", [("cuda", BF16), ("cpu", ir.DataType.FLOAT16),
                                       ("cpu", ir.DataType.FLOAT)])
def test_not_applied_where_the_ep_computes_the_dtype(ep, dtype):
    assert not Float32Compute().applies(RuleContext(get_ep(ep), dtype, "decoder"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    # the Bazel-built seed-0 checkpoint (//testing/tiny:hf in data): read, never written
    return seed0_checkpoint(str(tmp_path_factory.mktemp("llama")), "tiny-llama")


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_bf16_build_runs_on_onnxruntime_cpu(checkpoint, ep, tmp_path):
    """bf16 weights and I/O; logits within bf16 rounding of the f32 build.

    Tolerance: weights rounded to bf16 (8 bits of mantissa, relative error
    <= 2**-9) perturb logits of magnitude < 2 by a few 1e-3; 2e-2 leaves
    margin while a real dtype bug (wrong cast, garbage bits) is off by O(1).
    """
    ids, mask = parity.make_batch(1031, pad=0)
    results = {}
    for dtype, np_dtype in (("f32", np.float32), ("bf16", ml_dtypes.bfloat16)):
        package = build(checkpoint, execution_provider=ep, dtype=dtype)
        session = ort.InferenceSession(package.save(str(tmp_path / dtype)) + "/model.onnx")
        results[dtype], _ = parity.onnx_greedy_logits(session, package.config, ids, mask, 3,
                                                      np_dtype)
        if dtype == "bf16":
            types = {i.name: i.type for i in session.get_inputs()}
            assert types["past_key_values.0.key"] == "tensor(bfloat16)"
            assert session.get_outputs()[0].type == "tensor(bfloat16)"
    worst = max(float(np.abs(a - b).max()) for a, b in zip(results["bf16"], results["f32"]))
    assert 0 < worst < 2e-2
