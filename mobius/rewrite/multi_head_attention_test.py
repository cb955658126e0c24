"""MultiHeadAttentionFusion: split-head Attention outside decoders -> MultiHeadAttention."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.multi_head_attention import MultiHeadAttentionFusion
from mobius.rewrite.rule import RuleContext
from testing.fusion_checks import (
    FLOAT,
    FLOAT16,
    apply_rule,
    check_model,
    copy_model,
    custom_domain_nodes,
    histogram,
    info,
    inline_for,
    make_model,
    run_ort,
    weight,
    without_functions,
)

RNG = np.random.default_rng(5)
H, N, D = 24, 3, 8  # hidden, heads, head_dim
MHA = "com.microsoft::MultiHeadAttention"
ENCODER = "encoder"


def encoder_attention(mask="padding", layers=1, elem=FLOAT, scale=None, merged=(0, 0, H),
                      causal=0, softcap=None, q_reader=False):
    """y = o(Attention over heads of q(x), k(x), v(x)), ``layers`` times.

    ``mask``: "padding" [B, 1, S, S] input, "heads" [1, N, S, S] input, "rows1"
    [B, 1, 1, S] (broadcast over queries), "rank2" [S, S], or None.
    """
    np_t = np.float32 if elem == FLOAT else np.float16
    inputs = [info("x", elem, ["B", "S", H])]
    mask_shapes = {"padding": ["B", 1, "S", "S"], "heads": [1, N, "S", "S"],
                   "rows1": ["B", 1, 1, "S"], "rank2": ["S", "S"]}
    if mask is not None:
        inputs.append(info("mask", elem, mask_shapes[mask]))
    inits = [weight("split", np.array([0, 0, N, D], np.int64)),
             weight("merge", np.array(merged, np.int64))]
    nodes, hidden, outputs = [], "x", []
    for i in range(layers):
        heads = {}
        for name in "qkv":
            inits += [weight(f"w{name}{i}", (RNG.standard_normal((H, H)) / 4).astype(np_t)),
                      weight(f"b{name}{i}", RNG.standard_normal(H).astype(np_t))]
            nodes += [helper.make_node("MatMul", [hidden, f"w{name}{i}"], [f"{name}m{i}"]),
                      helper.make_node("Add", [f"{name}m{i}", f"b{name}{i}"], [f"{name}{i}"]),
                      helper.make_node("Reshape", [f"{name}{i}", "split"], [f"{name}r{i}"]),
                      helper.make_node("Transpose", [f"{name}r{i}"], [f"{name}t{i}"],
                                       perm=[0, 2, 1, 3])]
            heads[name] = f"{name}t{i}"
        attrs = {"is_causal": causal}
        if scale is not None:
            attrs["scale"] = scale
        if softcap is not None:
            attrs["softcap"] = softcap
        operands = [heads["q"], heads["k"], heads["v"]] + (["mask"] if mask else [])
        nodes += [helper.make_node("Attention", operands, [f"a{i}"], **attrs),
                  helper.make_node("Transpose", [f"a{i}"], [f"at{i}"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [f"at{i}", "merge"], [f"ar{i}"])]
        inits.append(weight(f"wo{i}", (RNG.standard_normal((H, H)) / 4).astype(np_t)))
        nodes.append(helper.make_node("MatMul", [f"ar{i}", f"wo{i}"], [f"y{i}"]))
        if q_reader:  # another reader of the split queries (DeBERTa's position scores)
            nodes.append(helper.make_node("ReduceSum", [heads["q"]], [f"qs{i}"]))
            outputs.append(info(f"qs{i}", elem, None))
        hidden = f"y{i}"
    return make_model(nodes, inputs, [info(hidden, elem, None)] + outputs, inits)


def _feeds(model, batch=2, seq=5, np_t=np.float32):
    feeds = {"x": RNG.standard_normal((batch, seq, H)).astype(np_t)}
    names = [v.name for v in model.graph.inputs]
    if "mask" in names:
        shape = [d if isinstance(d, int) else None for d in model.graph.inputs[1].shape]
        real = np.ones((batch, seq), bool)
        real[1, seq - 2:] = False  # row 1 right-padded by 2
        blocked = np.where(real, 0.0, np.finfo(np_t).min).astype(np_t)
        if len(shape) == 2:
            feeds["mask"] = np.triu(np.full((seq, seq), np.finfo(np_t).min, np_t), 1)
        elif shape[1] == N:  # per-head bias (relative positions), no padding
            feeds["mask"] = RNG.standard_normal((1, N, seq, seq)).astype(np_t)
        elif shape[2] == 1:
            feeds["mask"] = blocked[:, None, None, :]
        else:
            feeds["mask"] = np.broadcast_to(blocked[:, None, None, :], (batch, 1, seq, seq)).copy()
    return feeds


# --- pattern in -> pattern out; the kernel gives the same outputs ------------------------------


@pytest.mark.parametrize("mask", ["padding", "heads", None])
@pytest.mark.parametrize("scale", [None, 1.0])
def test_fuses_and_kernel_matches(mask, scale):
    model = encoder_attention(mask, layers=2, scale=scale)
    feeds = _feeds(model)
    before = run_ort(model, feeds)
    assert apply_rule(MultiHeadAttentionFusion(), model, "cpu", role=ENCODER) == 2
    hist = histogram(model)
    assert hist[MHA] == 2 and "Attention" not in hist
    assert "Transpose" not in hist and "Reshape" not in hist
    fused = [n for n in model.graph if n.op_type == "MultiHeadAttention"]
    for node in fused:
        assert node.attributes["num_heads"].value == N
        expected = D**-0.5 if scale is None else scale
        assert node.attributes["scale"].value == pytest.approx(expected)
        assert [v.producer().op_type for v in node.inputs[:3]] == ["Add"] * 3
        assert (len(node.inputs) == 6) == (mask is not None)
    check_model(model)
    after = run_ort(without_functions(model), feeds)  # the com.microsoft kernel
    np.testing.assert_allclose(after[0], before[0], rtol=1e-5, atol=1e-5)


def test_split_heads_with_other_readers_stay():
    model = encoder_attention(q_reader=True)
    feeds = _feeds(model)
    before = run_ort(model, feeds)
    assert apply_rule(MultiHeadAttentionFusion(), model, "cpu", role=ENCODER) == 1
    assert histogram(model)["Transpose"] == 1  # the split queries ReduceSum still reads
    after = run_ort(without_functions(model), feeds)
    for a, b in zip(after, before):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_f16_kernel_matches_on_cpu():
    model = encoder_attention(elem=FLOAT16)
    feeds = _feeds(model, np_t=np.float16)
    before = run_ort(model, feeds)
    assert apply_rule(MultiHeadAttentionFusion(), model, "cpu", ir.DataType.FLOAT16,
                      role=ENCODER) == 1
    after = run_ort(without_functions(model), feeds)
    np.testing.assert_allclose(after[0].astype(np.float32), before[0].astype(np.float32),
                               rtol=1e-2, atol=1e-2)


# --- near misses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(mask="rows1"),  # the kernels do not broadcast the bias over queries
        dict(mask="rank2"),  # attention_bias must be rank 4
        dict(causal=1),
        dict(softcap=30.0),
        dict(merged=(0, -1, H)),  # heads merged by another Reshape than [0, 0, N * d]
    ],
    ids=["bias_rows_1", "mask_rank_2", "causal", "softcap", "merge_shape"],
)
def test_near_misses_are_left_unchanged(kwargs):
    model = encoder_attention(**kwargs)
    before = histogram(model)
    assert apply_rule(MultiHeadAttentionFusion(), model, "cpu", role=ENCODER) == 0
    assert histogram(model) == before


# --- gating ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ep", ["default", "trt-rtx", "mlx", "onnx-standard"])
def test_not_applied_where_the_ep_has_no_mha_dtypes(ep):
    model = encoder_attention()
    assert apply_rule(MultiHeadAttentionFusion(), model, ep, role=ENCODER) == 0
    optimize_model(model, ep, model_role=ENCODER)
    assert MHA not in histogram(model)


def test_decoder_role_is_left_to_group_query_attention():
    model = encoder_attention()
    assert apply_rule(MultiHeadAttentionFusion(), model, "cpu", role="decoder") == 0


@pytest.mark.parametrize("ep", ["cpu", "cuda", "dml", "webgpu"])
@pytest.mark.parametrize("role", ["encoder", "vision", "embedding"])
def test_applied_where_capabilities_say(ep, role):
    report = optimize_model(encoder_attention(), ep, model_role=role)
    assert report.histogram.get(MHA) == 1
    assert report.matched("MultiHeadAttentionFusion") == 1


def test_gated_by_capability_data_not_names():
    f16_only = EpCapabilities(name="mha-f16-only", compute_dtypes={ir.DataType.FLOAT,
                                                                    ir.DataType.FLOAT16},
                               mha_dtypes={ir.DataType.FLOAT16},
                               contrib_ops={"MultiHeadAttention"})
    rule = MultiHeadAttentionFusion()
    assert not rule.applies(RuleContext(f16_only, ir.DataType.FLOAT, ENCODER))
    assert rule.applies(RuleContext(f16_only, ir.DataType.FLOAT16, ENCODER))
    with pytest.raises(ValueError, match="MultiHeadAttention is not in contrib_ops"):
        EpCapabilities(name="no-kernel", mha_dtypes={ir.DataType.FLOAT})
    for caps in ep_registry:
        for dtype in caps.dtypes:
            expected = dtype in caps.mha_dtypes
            assert rule.applies(RuleContext(caps, dtype, ENCODER)) == expected


# --- the function body == the kernel -------------------------------------------------------------


@pytest.mark.parametrize("mask", ["padding", None])
def test_inlined_body_is_the_original_standard_graph(mask):
    model = encoder_attention(mask, layers=2)
    feeds = _feeds(model)
    original = run_ort(model, feeds)
    apply_rule(MultiHeadAttentionFusion(), model, "cpu", role=ENCODER)
    kernel = run_ort(without_functions(model), feeds)
    inlined = copy_model(model)
    assert inline_for(inlined, "onnx-standard") == 2
    assert custom_domain_nodes(inlined) == [] and not inlined.functions
    hist = histogram(inlined)
    assert hist["Attention"] == 2 and hist["Reshape"] == 8 and hist["Transpose"] == 8
    check_model(inlined)
    body = run_ort(inlined, feeds)
    np.testing.assert_allclose(body[0], kernel[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(body[0], original[0], rtol=1e-6, atol=1e-6)
