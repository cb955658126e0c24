"""SparseMoE vs transformers' Mixtral / Qwen3-MoE / Qwen2-MoE (shared expert) sparse blocks,
recorded at build time (moe_cases.py: the blocks' state in the per-expert checkpoint layout,
their inputs and outputs).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import moe_cases as cases
from mobius.components.moe import (
    MIXTRAL_EXPERT_NAMES,
    QWEN_EXPERT_NAMES,
    SparseMoE,
    routing_weights,
)
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model, run_reference
from testing.recorded_arrays import load

HIDDEN, INTER, SHARED = cases.HIDDEN, cases.INTER, cases.SHARED
NAMES = {"mixtral": MIXTRAL_EXPERT_NAMES, "qwen3_moe": QWEN_EXPERT_NAMES,
         "qwen2_moe": QWEN_EXPERT_NAMES}


def _recorded(tmp_path, case, dtype=ir.DataType.FLOAT):
    """The case's mobius SparseMoE on transformers' weights, and the recorded x and y."""
    (kind, experts, top_k, normalize), _, _ = cases.RUNS[case]
    model = _mobius(tmp_path, load(cases, case, "state"), NAMES[kind], experts, top_k,
                    normalize, kind == "qwen2_moe", dtype)
    run = load(cases, case)
    return model, run["x"], run["y"]


def _mobius(tmp_path, state, names, num_experts, top_k, normalize, shared, dtype=ir.DataType.FLOAT):
    with build_context(None, dtype):
        moe = SparseMoE(HIDDEN, INTER, num_experts, top_k, normalize_top_k=normalize,
                        expert_names=names, shared_expert_size=SHARED if shared else None)
    attach_arrays(moe, state, tmp_path)
    return component_model([("x", dtype, ["batch", "seq", HIDDEN])],
                           lambda op, x_: moe(op, x_), [("y", ["batch", "seq", HIDDEN])])


@pytest.mark.parametrize("case", sorted(cases.BLOCKS))
def test_matches_transformers(tmp_path, case):
    model, x, expected = _recorded(tmp_path, case)
    (got,) = run_model(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_single_token_and_empty_experts(tmp_path):
    """Decode shape [batch, 1, hidden]: most experts get no token and must still run (0 rows)."""
    model, x, expected = _recorded(tmp_path, "single_token")
    assert x.shape == (1, 1, HIDDEN)
    (got,) = run_model(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, np_dtype, tol", [
    (ir.DataType.FLOAT16, np.float16, 2e-2),
    (ir.DataType.BFLOAT16, None, 6e-2),
], ids=["f16", "bf16"])
def test_half_precision(tmp_path, dtype, np_dtype, tol):
    import ml_dtypes

    np_dtype = np_dtype or ml_dtypes.bfloat16
    model, x, expected = _recorded(tmp_path, "half_precision", dtype)
    runner = run_reference if dtype == ir.DataType.BFLOAT16 else run_model
    (got,) = runner(model, {"x": x.astype(np_dtype)})
    assert got.dtype == np.dtype(np_dtype)
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("normalize", [False, True])
def test_routing_weights_are_dense_top_k(normalize):
    run = load(cases, "routing")  # torch's softmax -> topk -> (renormalize) -> scatter
    logits = run["logits"]
    model = component_model(
        [("logits", ir.DataType.FLOAT, [3, 7, 6])],
        lambda op, lg: routing_weights(op, lg, cases.ROUTING_TOP_K, normalize, ir.DataType.FLOAT),
        ["routing"])
    (got,) = run_model(model, {"logits": logits})
    expected = run[f"normalize_{normalize}"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert ((got > 0).sum(-1) == 2).all()


def test_parameter_names_follow_the_checkpoints():
    with build_context(None, ir.DataType.FLOAT):
        mixtral = SparseMoE(HIDDEN, INTER, 2, 1, expert_names=MIXTRAL_EXPERT_NAMES)
        qwen2 = SparseMoE(HIDDEN, INTER, 2, 1, shared_expert_size=SHARED)
    assert sorted(n for n, _ in mixtral.named_parameters()) == [
        "experts.0.w1.weight", "experts.0.w2.weight", "experts.0.w3.weight",
        "experts.1.w1.weight", "experts.1.w2.weight", "experts.1.w3.weight", "gate.weight"]
    assert {n for n, _ in qwen2.named_parameters()} >= {
        "experts.1.gate_proj.weight", "experts.1.up_proj.weight", "experts.1.down_proj.weight",
        "shared_expert.gate_proj.weight", "shared_expert_gate.weight", "gate.weight"}


def test_bad_top_k():
    with build_context(None, ir.DataType.FLOAT), pytest.raises(ValueError, match="top_k"):
        SparseMoE(HIDDEN, INTER, 4, 5)
