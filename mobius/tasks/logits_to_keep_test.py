"""num_logits_to_keep: the last k logit rows of the full graph, k=0 meaning all."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.tasks.logits_to_keep import INPUT, add_logits_to_keep
from mobius.tiny.checkpoint import make_tiny_checkpoint


def _session(package, folder):
    return ort.InferenceSession(package.save(str(folder)) + "/model.onnx",
                                providers=["CPUExecutionProvider"])


def _feeds(session, seq: int) -> dict:
    inputs = {i.name: i for i in session.get_inputs()}
    index = np.int32 if inputs["input_ids"].type == "tensor(int32)" else np.int64
    feeds = {"input_ids": np.arange(5, 5 + 2 * seq, dtype=index).reshape(2, seq),
             "attention_mask": np.ones((2, seq), index),
             "position_ids": np.tile(np.arange(seq, dtype=index), (2, 1))}
    for name, info in inputs.items():
        if name.startswith("past_key_values"):
            feeds[name] = np.zeros((2, info.shape[1], 0, info.shape[3]), np.float32)
    return {k: v for k, v in feeds.items() if k in inputs}


# gemma2: soft-capping after the LM head; granite: logits scaling; webgpu: int32 I/O.
@pytest.mark.parametrize("tiny,ep", [("tiny-llama", "cpu"), ("tiny-gemma2", "default"),
                                     ("tiny-granite", "cpu"), ("tiny-qwen3", "webgpu")])
def test_last_k_rows_of_the_full_logits(tmp_path, tiny, ep):
    checkpoint = make_tiny_checkpoint(tiny, str(tmp_path / "ckpt"))
    full = _session(build(checkpoint, execution_provider=ep), tmp_path / "full")
    kept = _session(build(checkpoint, execution_provider=ep, logits_to_keep=True), tmp_path / "k")
    feeds = _feeds(full, seq=6)
    expected = full.run(["logits"], feeds)[0]
    index = next(i for i in kept.get_inputs() if i.name == INPUT)
    dtype = np.int32 if index.type == "tensor(int32)" else np.int64
    for k in (0, 1, 3):
        got = kept.run(["logits"], {**feeds, INPUT: np.array(k, dtype)})[0]
        np.testing.assert_array_equal(got, expected if k == 0 else expected[:, -k:])


def test_default_is_off_for_genai_and_on_for_transformers_js(tmp_path):
    checkpoint = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    for layout, present in (("genai", False), ("transformers.js", True)):
        names = [v.name for v in build(checkpoint, layout=layout).model.graph.inputs]
        assert (INPUT in names) is present, layout


def test_graph_without_lm_head_is_rejected():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, 2, 3]))
    node = ir.Node("", "Relu", [x])
    node.outputs[0].name = "logits"
    graph = ir.Graph([x], [node.outputs[0]], nodes=[node], opset_imports={"": 21})
    with pytest.raises(MobiusError, match="no LM head"):
        add_logits_to_keep(ir.Model(graph, ir_version=10))
