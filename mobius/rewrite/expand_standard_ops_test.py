"""ExpandStandardOps: opset-23 RMSNormalization / RotaryEmbedding / Attention -> ONNX bodies."""

from __future__ import annotations

import copy

import numpy as np
import onnx_ir as ir
import pytest

from mobius.ep.registry import get_ep
from mobius.rewrite import expand_standard_ops as expand
from mobius.rewrite.expand_standard_ops import ExpandStandardOps
from mobius.rewrite.rule import RuleContext
from mobius.roles import DECODER
from testing.onnx_graphs import component_model, run_model

F32 = ir.DataType.FLOAT
OPENVINO = RuleContext(get_ep("openvino"), F32, DECODER)
B, H, KV, S, P, D = 2, 4, 2, 3, 5, 8  # batch, heads, kv heads, new tokens, past, head dim


def _norm_rope_attention(op, x, cos, sin, past_k, past_v, mask):
    """An opset-23 layer in the forms the generic decoder uses (4-D Q/K/V, cache, bool mask)."""
    weight = op.Constant(value=ir.tensor(np.linspace(0.5, 1.5, H * D, dtype=np.float32)))
    h = op.RMSNormalization(x, weight, axis=-1, epsilon=1e-6, stash_type=1)
    q = op.Transpose(op.Reshape(h, op.Constant(value_ints=[B, S, H, D])), perm=[0, 2, 1, 3])
    kv = op.Slice(h, op.Constant(value_ints=[0]), op.Constant(value_ints=[KV * D]),
                  op.Constant(value_ints=[2]))
    k = op.Transpose(op.Reshape(kv, op.Constant(value_ints=[B, S, KV, D])), perm=[0, 2, 1, 3])
    q = op.RotaryEmbedding(q, cos, sin, interleaved=0, rotary_embedding_dim=0)
    k = op.RotaryEmbedding(k, cos, sin, interleaved=0, rotary_embedding_dim=0)
    y, present_k, present_v = op.Attention(q, k, k, mask, past_k, past_v, _outputs=3)
    return y, present_k, present_v


def _model():
    return component_model(
        inputs=[("x", F32, [B, S, H * D]), ("cos", F32, [B, S, D // 2]),
                ("sin", F32, [B, S, D // 2]), ("past_k", F32, [B, KV, P, D]),
                ("past_v", F32, [B, KV, P, D]), ("mask", ir.DataType.BOOL, [B, 1, S, P + S])],
        forward=_norm_rope_attention, outputs=["y", "present_k", "present_v"])


def _feeds():
    rng = np.random.default_rng(0)
    angles = rng.uniform(0, 3, (B, S, D // 2)).astype(np.float32)
    mask = np.tril(np.ones((S, P + S), bool), k=P)[None, None].repeat(B, 0)
    mask[1, :, :, 0] = False  # a padded slot in the second row
    return {"x": rng.standard_normal((B, S, H * D), np.float32), "cos": np.cos(angles),
            "sin": np.sin(angles), "past_k": rng.standard_normal((B, KV, P, D), np.float32),
            "past_v": rng.standard_normal((B, KV, P, D), np.float32), "mask": mask}


def test_every_opset23_op_becomes_older_standard_ops():
    model = _model()
    assert ExpandStandardOps().apply(model, OPENVINO) == 4
    ops = {node.op_type for node in model.graph}
    assert not ops & {"RMSNormalization", "RotaryEmbedding", "Attention"}
    assert all(node.domain == "" for node in model.graph)
    assert not model.functions and "mobius.expand" not in model.opset_imports


def test_reduction_axes_are_folded_to_constants():
    """OpenVINO's frontend needs static reduction axes: the bodies' Range(axis, rank) folds."""
    model = _model()
    ExpandStandardOps().apply(model, OPENVINO)
    for node in model.graph:
        if node.op_type.startswith("Reduce") and len(node.inputs) > 1:
            axes = node.inputs[1]
            assert axes.const_value is not None or axes.producer().op_type == "Constant", node


def test_same_outputs_as_the_opset23_ops():
    feeds = _feeds()
    before = run_model(_model(), feeds)
    model = _model()
    ExpandStandardOps().apply(model, OPENVINO)
    after = run_model(model, feeds)
    for a, b in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ep", ["cpu", "default", "onnx-standard"])
def test_not_legal_where_the_ep_has_the_ops(ep):
    assert not ExpandStandardOps().applies(RuleContext(get_ep(ep), F32, DECODER))


def _mha_with_cache(op, q, k, v, past_k, past_v):
    y, present_k, present_v = op.Attention(q, k, v, None, past_k, past_v, is_causal=1, _outputs=3)
    return y, present_k, present_v


def test_mha_with_a_named_cache_length_expands_without_head_copies():
    """Equal Q and K/V head counts need no head expansion: the body's Expand to K's own shape
    folds away when the present cache names its length, as a decoder's outputs do."""
    cache = ["batch", H, "past", D]
    new = ["batch", H, "seq", D]
    model = component_model(
        inputs=[("q", F32, new), ("k", F32, new), ("v", F32, new), ("past_k", F32, cache),
                ("past_v", F32, cache)],
        forward=_mha_with_cache,
        outputs=["y", ("present_k", ["batch", H, "total", D]),
                 ("present_v", ["batch", H, "total", D])])
    ExpandStandardOps().apply(model, OPENVINO)
    assert "Expand" not in {node.op_type for node in model.graph}


def test_identical_nodes_share_one_folded_body():
    """A decoder's norms (same attributes, same shapes) fold one body, inlined at each site."""
    def two_norms(op, x):
        weight = op.Constant(value=ir.tensor(np.ones(H * D, np.float32)))
        return op.RMSNormalization(op.RMSNormalization(x, weight, axis=-1), weight, axis=-1)

    model = component_model(inputs=[("x", F32, [B, S, H * D])], forward=two_norms,
                            outputs=["y"])
    folded = []
    original = expand._add_folded_body
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(expand, "_add_folded_body",
                      lambda *args: folded.append(args[-1]) or original(*args))
        assert ExpandStandardOps().apply(model, OPENVINO) == 2
    assert len(folded) == 1
    x = np.random.default_rng(0).standard_normal((B, S, H * D), np.float32)
    rms = lambda a: a / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + 1e-5)  # noqa: E731
    np.testing.assert_allclose(run_model(model, {"x": x})[0], rms(rms(x)), rtol=1e-5, atol=1e-5)
