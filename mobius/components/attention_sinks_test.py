"""sink_attention (gpt-oss's per-head sinks in the softmax) against a numpy reference, on
onnxruntime and onnx.reference; and onnxruntime's CPU GroupQueryAttention kernel with
the same sinks as ``head_sink`` (what caps.gqa_head_sink declares for the cpu EP), with
the GQA node's own body (what an inlining EP runs)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.attention_sinks import sink_attention
from mobius.contrib.group_query_attention import GqaSpec, make_gqa_node
from testing.onnx_graphs import component_model, run_model, run_reference

B, H, KV, D = 2, 4, 2, 16
F32 = ir.DataType.FLOAT
NEG = np.finfo(np.float32).min


def _case(seq: int, past: int, sink_scale: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    total = seq + past
    q = rng.standard_normal((B, H, seq, D)).astype(np.float32)
    k, v = (rng.standard_normal((B, KV, seq, D)).astype(np.float32) for _ in range(2))
    past_k, past_v = (rng.standard_normal((B, KV, past, D)).astype(np.float32) for _ in range(2))
    sinks = (sink_scale * rng.standard_normal(H)).astype(np.float32)
    mask = np.zeros((B, 1, seq, total), np.float32)
    for i in range(seq):
        mask[:, :, i, past + i + 1:] = NEG  # causal
        mask[:, :, i, : max(0, past + i - 2)] = NEG  # a window of 3
    mask[1, :, :, :1] = NEG  # row 1 left-padded
    return dict(q=q, k=k, v=v, mask=mask, past_k=past_k, past_v=past_v, sinks=sinks)


def _reference(c):
    keys = np.repeat(np.concatenate([c["past_k"], c["k"]], 2), H // KV, 1)
    values = np.repeat(np.concatenate([c["past_v"], c["v"]], 2), H // KV, 1)
    scores = c["q"] @ keys.transpose(0, 1, 3, 2) * D**-0.5 + c["mask"]
    sink = np.broadcast_to(c["sinks"][None, :, None, None], scores.shape[:3] + (1,))
    logits = np.concatenate([scores, sink], -1)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return probs[..., :-1] @ values


def _component():
    names = ("q", "k", "v", "mask", "past_k", "past_v", "sinks")
    shapes = (["b", H, "s", D], ["b", KV, "s", D], ["b", KV, "s", D], ["b", 1, "s", "t"],
              ["b", KV, "p", D], ["b", KV, "p", D], [H])
    return component_model(
        [(n, F32, s) for n, s in zip(names, shapes)],
        lambda op, *xs: sink_attention(op, *xs, num_heads=H, scale=D**-0.5, dtype=F32),
        [("y", ["b", H, "s", D]), ("present_k", ["b", KV, "t", D]),
         ("present_v", ["b", KV, "t", D])])


@pytest.mark.parametrize("seq,past,sink_scale", [(6, 0, 2.0), (1, 5, 2.0), (3, 4, 0.0)])
def test_sink_attention_matches_numpy(seq, past, sink_scale):
    case = _case(seq, past, sink_scale)
    expected = _reference(case)
    for run in (run_model, run_reference):
        y, present_k, _ = run(_component(), case)
        np.testing.assert_allclose(y, expected, atol=1e-5)
        np.testing.assert_array_equal(present_k, np.concatenate([case["past_k"], case["k"]], 2))
    no_sinks = dict(case, sinks=np.full(H, -1e4, np.float32))  # a sink that takes no weight
    assert np.abs(run_model(_component(), no_sinks)[0] - expected).max() > 1e-2


def _gqa_model():
    d_q, d_kv = H * D, KV * D
    inputs = [("query", ["b", "s", d_q]), ("key", ["b", "s", d_kv]), ("value", ["b", "s", d_kv]),
              ("past_key", ["b", KV, "p", D]), ("past_value", ["b", KV, "p", D])]
    model = component_model(
        [(n, F32, s) for n, s in inputs] + [("seqlens_k", ir.DataType.INT32, ["b"]),
                                            ("total", ir.DataType.INT32, []),
                                            ("mask", F32, ["b", 1, "s", "t"]),
                                            ("sinks", F32, [H])],
        lambda op, *xs: op.Identity(xs[0]), [("unused", ["b", "s", d_q])])
    graph = model.graph
    values = list(graph.inputs)
    spec = GqaSpec(H, KV, D, D**-0.5, False, head_sink=True)
    node = make_gqa_node(model, spec, values[:7] + [None, None, None] + values[7:], "gqa")
    graph.append(node)
    graph.outputs.clear()
    for value, name, shape in zip(node.outputs, ("y", "present_k", "present_v"),
                                  (["b", "s", d_q], ["b", KV, "t", D], ["b", KV, "t", D])):
        value.name, value.type, value.shape = name, ir.TensorType(F32), ir.Shape(shape)
        graph.outputs.append(value)
    graph.remove(graph.node(0), safe=True)
    return model


@pytest.mark.parametrize("seq,past", [(6, 0), (1, 5)])
def test_cpu_gqa_kernel_takes_head_sink(seq, past):
    """Batched prefill (no past) and decode steps: the GQA kernel's own cases."""
    c = _case(seq, past, 2.0)
    total = seq + past
    feeds = {"query": c["q"].transpose(0, 2, 1, 3).reshape(B, seq, H * D),
             "key": c["k"].transpose(0, 2, 1, 3).reshape(B, seq, KV * D),
             "value": c["v"].transpose(0, 2, 1, 3).reshape(B, seq, KV * D),
             "past_key": c["past_k"], "past_value": c["past_v"],
             "seqlens_k": np.full(B, total - 1, np.int32), "total": np.array(total, np.int32),
             "mask": c["mask"], "sinks": c["sinks"]}
    expected = _reference(c).transpose(0, 2, 1, 3).reshape(B, seq, H * D)
    (kernel, _, _) = run_model(_gqa_model(), feeds)  # the com.microsoft kernel
    np.testing.assert_allclose(kernel, expected, atol=1e-5)
    (body, _, _) = run_reference(_gqa_model(), feeds)  # its function body
    np.testing.assert_allclose(body, expected, atol=1e-5)
