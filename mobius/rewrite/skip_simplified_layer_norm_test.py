"""SkipSimplifiedLayerNormFusion: Add + RMSNormalization -> SkipSimplifiedLayerNormalization."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import helper

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.skip_simplified_layer_norm import SkipSimplifiedLayerNormFusion
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

#: this test's Bazel target, read by //tools:rewrite_rules
#: (~60 small ORT sessions + four tiny-model builds and greedy decoding)
TEST_TARGET = {"size": "medium", "tiny": ["tiny-llama", "tiny-qwen3"]}

FUSED = "com.microsoft::SkipSimplifiedLayerNormalization"
H = 16
RNG = np.random.default_rng(0)


def _rms(name, x, gamma, out, **attrs):
    attrs.setdefault("axis", -1)
    attrs.setdefault("epsilon", 1e-6)
    attrs.setdefault("stash_type", 1)
    return helper.make_node("RMSNormalization", [x, gamma], [out], name=name, **attrs)


def pre_norm_stack(layers: int = 2, dtype=FLOAT, sum_is_output: bool = False, **norm_attrs):
    """A pre-norm decoder with MatMuls for attention/MLP: 2L+1 norms, 2L residual Adds.

    h0 -> norm -> MatMul -> h1 = h0 + . -> norm -> MatMul -> h2 = h1 + . -> ... -> final norm
    """
    np_dtype = np.float16 if dtype == FLOAT16 else np.float32
    nodes, inits = [], []
    hidden = "h0"
    for i in range(2 * layers):
        inits.append(weight(f"g{i}", (1 + 0.1 * RNG.standard_normal(H)).astype(np_dtype)))
        inits.append(weight(f"w{i}", (0.3 * RNG.standard_normal((H, H))).astype(np_dtype)))
        nodes.append(_rms(f"norm{i}", hidden, f"g{i}", f"n{i}", **norm_attrs))
        nodes.append(helper.make_node("MatMul", [f"n{i}", f"w{i}"], [f"b{i}"]))
        nodes.append(helper.make_node("Add", [hidden, f"b{i}"], [f"h{i + 1}"], name=f"add{i}"))
        hidden = f"h{i + 1}"
    inits.append(weight("gf", (1 + 0.1 * RNG.standard_normal(H)).astype(np_dtype)))
    nodes.append(_rms("final_norm", hidden, "gf", "y", **norm_attrs))
    outputs = [info("y", dtype, None)]
    if sum_is_output:
        outputs.append(info(hidden, dtype, None))
    return make_model(nodes, [info("h0", dtype, ["batch", "seq", H])], outputs, inits)


def _feeds(dtype=np.float32, shape=(2, 5, H)):
    return {"h0": RNG.standard_normal(shape).astype(dtype)}


def _single(a_shape, b_shape, norm_attrs=None, gamma_len=H, extra_use=False, dtype=FLOAT):
    """y = RMSNorm(a + b) (+ z = (a + b) * 2 when extra_use)."""
    np_dtype = np.float16 if dtype == FLOAT16 else np.float32
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             _rms("norm", "s", "g", "y", **(norm_attrs or {}))]
    outputs = [info("y", dtype, None)]
    inits = [weight("g", (1 + 0.1 * RNG.standard_normal(gamma_len)).astype(np_dtype))]
    if extra_use:
        inits.append(weight("two", np.array(2.0, np_dtype)))
        nodes.append(helper.make_node("Mul", ["s", "two"], ["z"]))
        outputs.append(info("z", dtype, None))
    return make_model(nodes, [info("a", dtype, a_shape), info("b", dtype, b_shape)], outputs, inits)


# --- (a) pattern in -> pattern out ----------------------------------------------------------


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_fuses_every_residual_norm_across_layer_boundaries(layers):
    model = pre_norm_stack(layers)
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 2 * layers
    hist = histogram(model)
    # 2L+1 norms: all but the first (it reads h0, not an Add) are fused; no Add survives.
    assert hist == {FUSED: 2 * layers, "RMSNormalization": 1, "MatMul": 2 * layers}
    fused = [n for n in model.graph if n.op_type == "SkipSimplifiedLayerNormalization"]
    # Each sum but the last is read by the next residual Add, i.e. (fused) by the next
    # fused node, across the layer boundary: through output 3.
    for node, following in zip(fused, fused[1:]):
        assert [u.node for u in node.outputs[3].uses()] == [following]
        assert following.inputs[0] is node.outputs[3]
    assert not fused[-1].outputs[3].uses()
    for node in fused:
        assert node.outputs[1].name == "" and node.outputs[2].name == ""
        assert node.attributes["epsilon"].value == pytest.approx(1e-6)
    check_model(model)


def test_sum_that_is_a_graph_output_comes_from_output_3():
    model = pre_norm_stack(1, sum_is_output=True)
    feeds = _feeds()
    before = run_ort(model, feeds)
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 2
    last = [n for n in model.graph if n.op_type == "SkipSimplifiedLayerNormalization"][-1]
    assert model.graph.outputs[1] is last.outputs[3]
    assert [o.name for o in model.graph.outputs] == ["y", "h2"]
    for got, want in zip(run_ort(model, feeds), before):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sum_with_other_consumers_is_rerouted():
    model = _single(["B", "S", H], ["B", "S", H], extra_use=True)
    feeds = {"a": RNG.standard_normal((2, 3, H)).astype(np.float32),
             "b": RNG.standard_normal((2, 3, H)).astype(np.float32)}
    before = run_ort(model, feeds)
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 1
    assert histogram(model) == {FUSED: 1, "Mul": 1}
    for got, want in zip(run_ort(model, feeds), before):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("skip_shape", [[1, "S", H], ["S", H]])
def test_broadcast_skip_shapes_the_kernel_accepts(skip_shape):
    model = _single(["B", "S", H], skip_shape)
    feeds = {"a": RNG.standard_normal((2, 3, H)).astype(np.float32),
             "b": RNG.standard_normal([3 if d == "S" else d for d in skip_shape]).astype(np.float32)}
    before = run_ort(model, feeds)
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 1
    fused = next(iter(model.graph))
    assert fused.inputs[0].name == "a" and fused.inputs[1].name == "b"
    np.testing.assert_allclose(run_ort(without_functions(model), feeds)[0], before[0],
                               rtol=1e-5, atol=1e-5)


def test_broadcasting_operand_first_is_swapped_into_skip():
    model = _single(["S", H], ["B", "S", H])
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 1
    fused = next(iter(model.graph))
    assert fused.inputs[0].name == "b" and fused.inputs[1].name == "a"


def test_epsilon_and_stash_type_are_carried_over():
    model = _single(["B", "S", H], ["B", "S", H], norm_attrs={"epsilon": 0.03})
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 1
    fused = next(iter(model.graph))
    assert fused.attributes["epsilon"].value == pytest.approx(0.03)
    body = model.functions[fused.op_identifier()]
    norm = next(n for n in body if n.op_type == "RMSNormalization")
    assert norm.attributes["epsilon"].value == pytest.approx(0.03)
    assert norm.attributes["stash_type"].value == 1


def test_positive_last_axis_matches():
    model = _single(["B", "S", H], ["B", "S", H], norm_attrs={"axis": 2})
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 1


# --- (b) near misses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        # normalizes over the last two axes: not what the kernel computes
        dict(a_shape=["B", "S", H], b_shape=["B", "S", H], norm_attrs={"axis": 1},
             gamma_len=None, reason="not over the last axis"),
        # a 1-D "skip" (bias-like broadcast): the kernel wants [B,S,H], [1,S,H] or [S,H]
        dict(a_shape=["B", "S", H], b_shape=[H]),
        # gamma [1] broadcast over H: legal RMSNormalization, but the kernel reads H values
        dict(a_shape=["B", "S", H], b_shape=["B", "S", H], gamma_len=1,
             reason="not a vector of the hidden size"),
        # 4-D tensors (per-head norms): the kernel takes 2-D / 3-D input
        dict(a_shape=["B", "S", 2, H], b_shape=["B", "S", 2, H]),
        # unknown dims that might differ: cannot prove the shapes are the kernel's
        dict(a_shape=[None, None, H], b_shape=[None, None, H]),
        # f16 with stash_type=0 computes in f16; the kernel accumulates in f32
        dict(a_shape=["B", "S", H], b_shape=["B", "S", H], norm_attrs={"stash_type": 0},
             dtype=FLOAT16, reason="stash_type 0"),
    ],
    ids=["axis1", "bias_like_skip", "scalar_gamma", "rank4", "unknown_dims", "f16_stash0"],
)
def test_near_misses_are_left_unchanged(case):
    """...and where the structure matched but check() said no, the rule records why
    (--trace prints it)."""
    case = dict(case)
    reason = case.pop("reason", None)
    if case.get("gamma_len", H) is None:  # axis=1 normalizes [S, H]: gamma must be [S?, H]
        case = {**case, "gamma_len": H}
    model = _single(**case)
    before = histogram(model)
    dtype = ir.DataType.FLOAT16 if case.get("dtype") == FLOAT16 else ir.DataType.FLOAT
    ep = "cuda" if dtype == ir.DataType.FLOAT16 else "cpu"
    rule = SkipSimplifiedLayerNormFusion()
    assert apply_rule(rule, model, ep, dtype) == 0
    assert histogram(model) == before
    assert rule.sites == ()
    if reason is not None:
        assert [r for _, r in rule.rejections if reason in r], rule.rejections


def test_norm_not_fed_by_an_add_is_left_alone():
    nodes = [helper.make_node("Mul", ["a", "b"], ["s"]), _rms("norm", "s", "g", "y")]
    model = make_model(nodes, [info("a", FLOAT, ["B", "S", H]), info("b", FLOAT, ["B", "S", H])],
                       [info("y", FLOAT, None)], [weight("g", np.ones(H, np.float32))])
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 0
    assert histogram(model) == {"Mul": 1, "RMSNormalization": 1}


def test_add_feeding_something_else_is_left_alone():
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, [info("a", FLOAT, ["B", "S", H]), info("b", FLOAT, ["B", "S", H])],
                       [info("y", FLOAT, None)])
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 0
    assert histogram(model) == {"Add": 1, "Relu": 1}


# --- (c) the rewritten graph runs with the same outputs ---------------------------------------


def test_fused_graph_matches_the_original_in_onnxruntime():
    model = pre_norm_stack(3, sum_is_output=True)
    feeds = _feeds()
    before = run_ort(model, feeds)
    apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu")
    # Without function bodies: onnxruntime must run its SkipSimplifiedLayerNormalization kernel.
    after = run_ort(without_functions(model), feeds)
    for got, want in zip(after, before):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_f16_fused_graph_runs():
    model = pre_norm_stack(1, dtype=FLOAT16)
    feeds = _feeds(np.float16)
    before = run_ort(model, feeds)
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu", ir.DataType.FLOAT16) == 2
    after = run_ort(without_functions(model), feeds)
    # f16 outputs (|y| ~ 1-3): the kernel and RMSNormalization both accumulate in f32 but
    # round the sum / output to f16 in different places; 1 f16 ulp at 2-4 is 2e-3.
    np.testing.assert_allclose(after[0].astype(np.float32), before[0].astype(np.float32),
                               rtol=2e-3, atol=4e-3)


# --- (d) gating -------------------------------------------------------------------------------


@pytest.mark.parametrize("ep", ["default", "trt-rtx", "mlx", "onnx-standard"])
def test_not_applied_where_the_ep_lacks_the_kernel(ep):
    rule = SkipSimplifiedLayerNormFusion()
    model = pre_norm_stack(1)
    before = histogram(model)
    assert apply_rule(rule, model, ep) == 0
    assert histogram(model) == before
    optimize_model(model, ep)
    assert FUSED not in histogram(model)


@pytest.mark.parametrize("ep", ["cpu", "cuda", "dml", "webgpu"])
def test_applied_where_the_ep_has_the_kernel(ep):
    model = pre_norm_stack(1)
    report = optimize_model(model, ep)
    assert report.histogram.get(FUSED) == 2
    assert report.matched("SkipSimplifiedLayerNormFusion") == 2


def test_gated_by_capability_data_not_names():
    from mobius.rewrite.rule import RuleContext

    rule = SkipSimplifiedLayerNormFusion()
    kernels = {"SkipLayerNormalization", "SkipSimplifiedLayerNormalization"}
    without_flag = EpCapabilities(name="x-no-flag", contrib_ops=kernels)
    with_flag = EpCapabilities(name="x-flag", contrib_ops=kernels, supports_skip_layer_norm=True)
    assert not rule.applies(RuleContext(without_flag, ir.DataType.FLOAT, "decoder"))
    assert rule.applies(RuleContext(with_flag, ir.DataType.FLOAT, "encoder"))
    assert not rule.applies(RuleContext(with_flag, ir.DataType.INT8, "decoder"))
    for caps in ep_registry:
        expected = caps.supports_skip_layer_norm and caps.has_kernel(
            "SkipSimplifiedLayerNormalization")
        assert rule.applies(RuleContext(caps, ir.DataType.FLOAT16, "decoder")) == expected


# --- (e) the function body == the kernel --------------------------------------------------------


def test_inlined_body_matches_the_kernel_and_is_standard_onnx():
    model = pre_norm_stack(2, sum_is_output=True)
    feeds = _feeds()
    original = run_ort(model, feeds)
    apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu")
    kernel = run_ort(without_functions(model), feeds)

    inlined = copy_model(model)
    assert inline_for(inlined, "onnx-standard") == 4
    assert custom_domain_nodes(inlined) == [] and not inlined.functions
    check_model(inlined)
    body = run_ort(inlined, feeds)
    for got_body, got_kernel, want in zip(body, kernel, original):
        np.testing.assert_allclose(got_body, got_kernel, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_body, want, rtol=1e-6, atol=1e-6)


def test_onnx_standard_pipeline_leaves_no_custom_ops():
    model = pre_norm_stack(2)
    feeds = _feeds()
    apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu")
    fused = run_ort(model, feeds)
    optimize_model(model, "onnx-standard")
    assert custom_domain_nodes(model) == []
    np.testing.assert_allclose(run_ort(model, feeds)[0], fused[0], rtol=1e-5, atol=1e-5)


def test_body_defines_mean_and_inv_std_var():
    """Outputs mobius leaves absent still have a definition in the body (float32, [..., 1])."""
    model = _single(["B", "S", H], ["B", "S", H])
    apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu")
    fused = next(iter(model.graph))
    for i in (1, 2, 3):
        fused.outputs[i].name = f"out{i}"
        model.graph.outputs.append(fused.outputs[i])
    a = RNG.standard_normal((2, 3, H)).astype(np.float32)
    b = RNG.standard_normal((2, 3, H)).astype(np.float32)
    inlined = copy_model(model)
    inline_for(inlined, "onnx-standard")
    _, mean, inv_std_var, total = run_ort(inlined, {"a": a, "b": b})
    s = a + b
    np.testing.assert_allclose(total, s, rtol=1e-6)
    np.testing.assert_allclose(mean, s.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv_std_var, 1 / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-6),
                               rtol=1e-5)


# --- end to end: the built-in tiny models ------------------------------------------------------


def _build(name, ep, tmp_path):
    from mobius.builder import build

    package = build(name, execution_provider=ep, prefill_logits="all")
    path = package.save(str(tmp_path / f"{name}-{ep}"), overwrite=True)
    return package, path


def _session(path):
    import os

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(os.path.join(path, "model.onnx"), options,
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name, per_layer_qk_norms", [("tiny-llama", 0), ("tiny-qwen3", 2)])
def test_tiny_model_cpu_build_fuses_2L_norms(name, per_layer_qk_norms, tmp_path):
    from mobius.optimize.histogram import op_histogram

    package, _ = _build(name, "cpu", tmp_path)
    layers = package.config.num_hidden_layers
    hist = op_histogram(package.models["model"])
    # Hidden-stream norms: input + post-attention per layer, plus the final norm = 2L+1.
    # Each but layer 0's input norm (it reads the embeddings) follows a residual Add.
    assert hist[FUSED] == 2 * layers
    # Left: layer 0's input norm, and the per-head q/k norms (4-D, not after an Add).
    assert hist["RMSNormalization"] == 1 + per_layer_qk_norms * layers


def test_tiny_llama_cpu_logits_match_the_default_build(tmp_path):
    from testing import parity

    cpu, cpu_path = _build("tiny-llama", "cpu", tmp_path)
    _, default_path = _build("tiny-llama", "default", tmp_path)
    config = cpu.config
    input_ids, attention_mask = parity.make_batch(config.vocab_size, pad=0)
    got, got_tokens = parity.onnx_greedy_logits(_session(cpu_path), config, input_ids,
                                                attention_mask, steps=4)
    want, want_tokens = parity.onnx_greedy_logits(_session(default_path), config, input_ids,
                                                  attention_mask, steps=4)
    assert parity.compare_logits(got, want, attention_mask) <= 1e-5
    for a, b in zip(got_tokens, want_tokens):
        np.testing.assert_array_equal(a, b)
