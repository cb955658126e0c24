"""testing/session_threads.py: a session without a thread count gets one; one with a count
keeps it. Run by testing/run_pytest.py, which applies the default itself."""

from __future__ import annotations

import onnx_ir as ir
import onnxruntime as ort

from testing.session_threads import default_to_one_thread


def _model() -> bytes:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    node = ir.node("Relu", [x])
    node.outputs[0].name, node.outputs[0].type = "y", ir.TensorType(ir.DataType.FLOAT)
    graph = ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 23})
    return ir.serde.serialize_model(ir.Model(graph, ir_version=10)).SerializeToString()


def _threads(session: ort.InferenceSession) -> int:
    return session.get_session_options().intra_op_num_threads


def test_a_session_without_a_thread_count_gets_one_thread():
    default_to_one_thread()
    assert _threads(ort.InferenceSession(_model(), providers=["CPUExecutionProvider"])) == 1
    options = ort.SessionOptions()
    assert _threads(ort.InferenceSession(_model(), options,
                                         providers=["CPUExecutionProvider"])) == 1


def test_a_session_with_a_thread_count_keeps_it():
    default_to_one_thread()
    default_to_one_thread()  # idempotent: the wrapper is not wrapped again
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    assert _threads(ort.InferenceSession(_model(), sess_options=options,
                                         providers=["CPUExecutionProvider"])) == 2
