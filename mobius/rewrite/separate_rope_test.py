"""SeparateRoPE: do_rotary=1 GQA -> RotaryEmbedding + do_rotary=0 GQA; parity; dml end to end."""

from __future__ import annotations

import os

import numpy as np
import onnx_ir as ir
import pytest

from mobius.contrib.group_query_attention import spec_from_node
from mobius.ep.capabilities import FLOAT_DTYPES
from mobius.ep.registry import ep_registry, get_ep
from testing import gqa_graphs as g
from mobius.rewrite.rule import RuleContext
from mobius.rewrite.separate_rope import SeparateRoPE
from mobius.roles import DECODER, ROLES

#: this test's Bazel target, read by //tools:rewrite_rules
#: (four tiny-llama f16 builds + greedy decoding)
TEST_TARGET = {"size": "medium"}

F32, F16 = g.F32, g.F16
DML_F32 = RuleContext(get_ep("dml"), F32, DECODER)
DML_F16 = RuleContext(get_ep("dml"), F16, DECODER)
F16_ATOL = 4 * 2.0**-9  # 4 float16 ulps at magnitude 2 (outputs are O(1))


def _max_diff(a, b) -> float:
    return max(float(np.abs(x.astype(np.float32) - y.astype(np.float32)).max()) for x, y in zip(a, b))


def _separate(built: g.GqaModel, ctx=DML_F32) -> int:
    return SeparateRoPE().apply(built.model, ctx)


def _gqas(model):
    return [n for n in model.graph if n.op_type == "GroupQueryAttention"]


def _f16_logit_tol(logits) -> float:
    """4 float16 ulps at the largest logit: the two graphs round differently, nothing more."""
    largest = max(float(np.abs(step).max()) for step in logits)
    return 4 * float(np.spacing(np.float16(largest)))


# ---- (a) pattern in -> pattern out ---------------------------------------------------------------


def test_absorbed_rope_becomes_rotary_embedding_nodes():
    built = g.gqa_model(F32, layers=2)
    assert _separate(built) == 2
    counts = g.op_counts(built.model)
    assert counts["RotaryEmbedding"] == 4
    assert counts["Gather"] == 2  # cos and sin, shared by both layers
    d = built.dims
    graph = built.model.graph
    for gqa in _gqas(built.model):
        spec = spec_from_node(gqa)
        assert not spec.do_rotary and not spec.packed_qkv
        assert gqa.attributes["do_rotary"].value == 0
        assert gqa.overload.endswith("_r0_p0") and gqa.op_identifier() in built.model.functions
        assert all(v is None for v in gqa.inputs[7:10])
        assert gqa.inputs[10].name == "attention_bias"
        for value, heads in zip(gqa.inputs[:2], (d.heads, d.kv_heads)):
            rotary = value.producer()
            assert rotary.op_type == "RotaryEmbedding" and rotary.domain == ""
            assert rotary.attributes["num_heads"].value == heads
            assert rotary.attributes["rotary_embedding_dim"].value == 0
            assert rotary.attributes["interleaved"].value == 0
            assert len(rotary.inputs) == 3  # 3-D cos/sin, no position_ids
            cos, sin = (v.producer() for v in rotary.inputs[1:3])
            assert cos.op_type == sin.op_type == "Gather"
            assert cos.inputs[0] is graph.initializers["cos_cache"]
            assert sin.inputs[0] is graph.initializers["sin_cache"]
            assert cos.inputs[1].name == sin.inputs[1].name == "position_ids"
        assert gqa.inputs[2].producer().op_type == "MatMul"  # value is not rotated


def test_packed_query_is_split_before_rotation():
    built = g.gqa_model(F32, packed=True, bias=True)
    assert _separate(built) == 1
    counts = g.op_counts(built.model)
    assert counts["Split"] == 1 and counts["RotaryEmbedding"] == 2 and counts["MatMul"] == 1
    gqa = built.gqa
    assert not spec_from_node(gqa).packed_qkv and gqa.attributes["do_rotary"].value == 0
    split = gqa.inputs[2].producer()
    assert split.op_type == "Split" and gqa.inputs[0].producer().inputs[0] is split.outputs[0]


def test_existing_gather_of_the_cache_is_reused():
    built = g.gqa_model(F32)
    graph = built.model.graph
    cos = ir.Node("", "Gather", [graph.initializers["cos_cache"], graph.inputs[3]],
                  attributes=[ir.AttrInt64("axis", 0)])
    graph.append(cos)  # after the GQA node: the rule must keep the graph sorted
    cos.outputs[0].name, cos.outputs[0].type = "cos_out", ir.TensorType(F32)
    graph.outputs.append(cos.outputs[0])
    assert graph.inputs[3].name == "position_ids"
    assert _separate(built) == 1
    assert g.op_counts(built.model)["Gather"] == 2  # the existing cos one + a new sin one
    rotary = built.gqa.inputs[0].producer()
    assert rotary.inputs[1] is cos.outputs[0]
    order = list(graph)
    assert order.index(cos) < order.index(rotary)
    feeds = built.feeds()
    g.run(built.model, feeds)  # valid, topologically sorted


def test_partial_rotary_sets_rotary_embedding_dim():
    dims = g.Dims(head_dim=32, rotary_dim=16)
    built = g.gqa_model(F32, dims=dims)
    assert _separate(built) == 1
    rotary = built.gqa.inputs[0].producer()
    assert rotary.attributes["rotary_embedding_dim"].value == 16


# ---- (b) near misses ------------------------------------------------------------------------------


@pytest.mark.parametrize("rope", ["outside", "none"])
def test_gqa_without_absorbed_rope_is_left_alone(rope):
    built = g.gqa_model(F32, rope=rope)
    before = g.op_counts(built.model)
    assert _separate(built) == 0
    assert g.op_counts(built.model) == before


def test_gqa_without_position_ids_is_left_alone():
    built = g.gqa_model(F32)
    built.gqa.replace_input_with(9, None)  # positions from seqlens_k: no RotaryEmbedding equivalent
    before = g.op_counts(built.model)
    assert _separate(built) == 0
    assert g.op_counts(built.model) == before
    assert built.gqa.attributes["do_rotary"].value == 1


# ---- (c) onnxruntime parity -----------------------------------------------------------------------


@pytest.mark.parametrize("dims", [g.Dims(), g.Dims(seq=1, past=4), g.Dims(batch=1, past=2),
                                  g.Dims(head_dim=32, rotary_dim=16)],
                         ids=["prefill", "decode", "chunk", "partial"])
@pytest.mark.parametrize("packed", [False, True], ids=["unpacked", "packed"])
@pytest.mark.parametrize("dtype, ctx, atol", [(F32, DML_F32, 1e-5), (F16, DML_F16, F16_ATOL)],
                         ids=["f32", "f16"])
def test_separated_rope_matches_fused_on_ort_cpu(dims, packed, dtype, ctx, atol):
    built = g.gqa_model(dtype, dims=dims, packed=packed, bias=True, layers=2)
    feeds = built.feeds()
    expected = g.run(built.model, feeds)
    assert _separate(built, ctx) == 2
    assert _max_diff(expected, g.run(built.model, feeds)) <= atol


# ---- (d) gating -------------------------------------------------------------------------------------


@pytest.mark.parametrize("ep", ep_registry.names())
@pytest.mark.parametrize("dtype", sorted(FLOAT_DTYPES, key=lambda d: d.name))
@pytest.mark.parametrize("role", ROLES)
def test_applies_exactly_where_the_ep_lacks_fused_rope(ep, dtype, role):
    caps = get_ep(ep)
    expected = role == DECODER and not caps.supports_fused_rope
    assert SeparateRoPE().applies(RuleContext(caps, dtype, role)) is expected


@pytest.mark.parametrize("ep, separates", [("dml", True), ("cpu", False), ("cuda", False),
                                           ("webgpu", False), ("mlx", False), ("trt-rtx", False)])
def test_gating_per_ep(ep, separates):
    assert SeparateRoPE().applies(RuleContext(get_ep(ep), F16, DECODER)) is separates


# ---- (d) tiny-llama for dml, and graphs fused for cuda re-targeted to dml -------------------------


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """tiny-llama f16 for default / dml / cuda(-> dml), saved; plus greedy logits of each."""
    import mobius
    from mobius.optimize.pipeline import optimize_model

    root = tmp_path_factory.mktemp("rope")
    checkpoint = g.tiny_checkpoint(root / "ckpt")
    out = {}
    for name, ep in (("default", "default"), ("dml", "dml"), ("cuda", "cuda"), ("cuda->dml", "cuda")):
        pkg = mobius.build(checkpoint, execution_provider=ep, dtype="f16")
        report = None
        if name == "cuda->dml":
            report = optimize_model(pkg.model, "dml", F16, "decoder")
        path = os.path.join(pkg.save(str(root / name.replace(">", "")), overwrite=True), "model.onnx")
        logits, tokens = g.greedy_logits(path, pkg.config, "f16", pad=0)
        out[name] = dict(pkg=pkg, report=report, logits=logits, tokens=tokens)
    return out


def _assert_dml_form(model, layers):
    gqas = _gqas(model)
    assert len(gqas) == layers
    for gqa in gqas:
        assert gqa.attributes["do_rotary"].value == 0
        assert all(v is not None for v in gqa.inputs[:3]), "no packed QKV on dml"
        assert all(v is None for v in gqa.inputs[7:10])
    counts = g.op_counts(model)
    assert counts["RotaryEmbedding"] == 2 * layers
    assert counts["MatMul"] == 7 * layers and counts["Gemm"] == 1  # the lm_head
    assert "Split" not in counts


def test_tiny_llama_dml_f16_build(builds):
    built = builds["dml"]
    _assert_dml_form(built["pkg"].model, built["pkg"].config.num_hidden_layers)
    ref = builds["default"]
    assert _max_diff(built["logits"], ref["logits"]) <= _f16_logit_tol(ref["logits"])


def test_cuda_graph_retargeted_to_dml_is_unpacked_and_separated(builds):
    built = builds["cuda->dml"]
    layers = built["pkg"].config.num_hidden_layers
    assert _gqas(builds["cuda"]["pkg"].model)[0].inputs[1] is None  # packed, do_rotary=1 before
    assert built["report"].matched("UnpackQKV") == layers
    assert built["report"].matched("SeparateRoPE") == layers
    _assert_dml_form(built["pkg"].model, layers)
    for other in ("cuda", "default", "dml"):
        ref = builds[other]["logits"]
        assert _max_diff(built["logits"], ref) <= _f16_logit_tol(ref), other
