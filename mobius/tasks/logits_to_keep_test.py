"""Which logits rows a decoder computes: num_logits_to_keep (the last k rows, k=0 meaning
all) and the genai layout's default, the last position only."""

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.tasks.logits_to_keep import INPUT, add_logits_to_keep, keep_last_logits
from mobius.tiny.checkpoint import make_tiny_checkpoint
from testing.genai_harness import genai_generate


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
    full = _session(build(checkpoint, execution_provider=ep, prefill_logits="all"),
                    tmp_path / "full")
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
    with pytest.raises(MobiusError, match="need the attention_mask and input_ids"):
        keep_last_logits(ir.Model(graph, ir_version=10))


# int4: the quantized head without Reshapes; onnx-standard: a MatMul of a DequantizeLinear
# after the Gemm's flatten (float); webgpu: int32 I/O; gemma2: soft-capping after the head.
@pytest.mark.parametrize("tiny,ep,quant", [("tiny-llama", "cpu", None), ("tiny-llama", "cpu", "int4"),
                                           ("tiny-gemma2", "default", None),
                                           ("tiny-qwen3", "webgpu", None),
                                           ("tiny-llama", "onnx-standard", "int4"),
                                           ("tiny-phi3", "onnx-standard", None)])
def test_genai_default_is_the_last_row_of_the_full_logits(tmp_path, tiny, ep, quant):
    checkpoint = make_tiny_checkpoint(tiny, str(tmp_path / "ckpt"))
    full = _session(build(checkpoint, execution_provider=ep, quant=quant, prefill_logits="all"),
                    tmp_path / "full")
    last = _session(build(checkpoint, execution_provider=ep, quant=quant), tmp_path / "last")
    assert [d for d in last.get_outputs()[0].shape][1] == 1  # static: genai's pruned-model check
    assert full.get_outputs()[0].shape[1] != 1
    for seq in (6, 1):
        feeds = _feeds(full, seq=seq)
        expected = full.run(["logits"], feeds)[0]
        np.testing.assert_array_equal(last.run(["logits"], feeds)[0], expected[:, -1:])
    feeds = _feeds(full, seq=6)
    for row_mask, position in (([0, 0, 1, 1, 1, 1], 5), ([1, 1, 1, 1, 0, 0], 3)):  # left / right
        feeds["attention_mask"][1] = row_mask
        expected = full.run(["logits"], feeds)[0]
        got = last.run(["logits"], feeds)[0]
        np.testing.assert_array_equal(got[0], expected[0, -1:])
        np.testing.assert_array_equal(got[1], expected[1, position:position + 1])


def test_genai_generates_the_same_tokens_from_last_row_logits(tmp_path):
    """genai pads a batch on the right and samples from the one logits row as it is:
    the graph must pick the shorter prompt's last real token itself."""
    checkpoint = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    prompts = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777], [45]]
    tokens = {}
    for mode in ("all", "last"):
        folder = build(checkpoint, execution_provider="cpu", prefill_logits=mode).save(
            str(tmp_path / mode))
        tokens[mode] = genai_generate(folder, prompts, max_new_tokens=6)
    assert tokens["last"] == tokens["all"]
    assert len({tuple(row[:1]) for row in tokens["all"]}) > 1  # rows differ from the first token


def test_genai_appends_a_second_prompt_after_generating(tmp_path):
    """A later chunk of several tokens on top of a KV cache (a chat's next turn): the row
    picked is the chunk's last, past the cache."""
    import onnxruntime_genai as og

    checkpoint = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    sequences = {}
    for mode in ("all", "last"):
        model = og.Model(build(checkpoint, execution_provider="cpu", prefill_logits=mode).save(
            str(tmp_path / mode)))
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=40, do_sample=False)
        generator = og.Generator(model, params)
        for turn in ([5, 9, 12, 40], [77, 78, 79, 80, 81]):
            generator.append_tokens(np.array([turn], np.int32))
            for _ in range(4):
                generator.generate_next_token()
        sequences[mode] = list(generator.get_sequence(0))
    assert sequences["last"] == sequences["all"] and len(sequences["all"]) == 17


def test_rejected_combinations(tmp_path):
    checkpoint = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    with pytest.raises(MobiusError, match="both choose"):
        build(checkpoint, prefill_logits="last", logits_to_keep=True)
    with pytest.raises(MobiusError, match="unknown prefill logits 'first'"):
        build(checkpoint, prefill_logits="first")
    bert = make_tiny_checkpoint("tiny-bert", str(tmp_path / "bert"))
    with pytest.raises(MobiusError, match="only a causal LM"):
        build(bert, prefill_logits="last")
    assert build(bert).model.graph.outputs[0].shape[1] != 1  # the default leaves encoders alone
