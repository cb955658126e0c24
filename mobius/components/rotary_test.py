"""RotaryEmbedding (position_ids -> cos/sin) and apply_rotary (incl. partial rotary).

cos/sin are compared with transformers' LlamaRotaryEmbedding for every RoPE
variant, including dynamic NTK past the base length (computed in the graph)
and LongRoPE on both sides of its switch; transformers' side is recorded at build time
(rotary_cases.py).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import rotary_cases as cases
from mobius.components.rotary import RotaryEmbedding, apply_rotary
from mobius.config.architecture import ArchitectureConfig
from mobius.context import build_context
from testing.onnx_graphs import component_model, run_model
from testing.recorded_arrays import load
from testing.reference_cases import case_dir

_DIMS = cases.DIMS
VARIANTS = cases.VARIANTS
_positions = cases.positions


def _rotary_model(rope, dtype=ir.DataType.FLOAT):
    with build_context(None, dtype):
        module = RotaryEmbedding(rope)
        model = component_model(
            inputs=[("position_ids", ir.DataType.INT64, ["batch", "seq"])],
            forward=lambda op, pos: module(op, pos),
            outputs=["cos", "sin"],
        )
    return model


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cos_sin_match_transformers(variant):
    with open(os.path.join(case_dir(cases, variant), "config.json")) as f:
        rope = ArchitectureConfig.from_dict(json.load(f)).rope
    recorded = load(cases, variant)
    positions = recorded["positions"]
    np.testing.assert_array_equal(positions, _positions(VARIANTS[variant][2]))
    cos, sin = run_model(_rotary_model(rope), {"position_ids": positions})
    hf_cos, hf_sin = recorded["cos"], recorded["sin"]
    half = rope.rotary_dim // 2
    assert cos.shape == sin.shape == (2, 10, half)
    # Angles up to 40 rad: float32 ulp there is 3.8e-6; allow a few.
    np.testing.assert_allclose(cos, hf_cos[..., :half], rtol=0, atol=2e-5)
    np.testing.assert_allclose(sin, hf_sin[..., :half], rtol=0, atol=2e-5)


def test_dynamic_past_base_really_differs_from_plain_rope():
    """Guards test_cos_sin_match_transformers[dynamic_past_base] against a vacuous pass."""
    max_pos, params, largest = VARIANTS["dynamic_past_base"]
    dynamic = ArchitectureConfig.from_dict(
        {**_DIMS, "model_type": "llama", "max_position_embeddings": max_pos,
         "rope_parameters": params}).rope
    plain = ArchitectureConfig.from_dict(
        {**_DIMS, "model_type": "llama", "max_position_embeddings": 64,
         "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}).rope
    positions = _positions(largest)
    dyn_cos, _ = run_model(_rotary_model(dynamic), {"position_ids": positions})
    plain_cos, _ = run_model(_rotary_model(plain), {"position_ids": positions})
    assert np.abs(dyn_cos - plain_cos).max() > 1e-2


def test_dynamic_ntk_follows_the_longest_position_at_run_time():
    """One graph, two lengths: within the base length it is plain RoPE; past it, NTK-scaled."""
    rope = ArchitectureConfig.from_dict(
        {**_DIMS, "model_type": "llama", "max_position_embeddings": 16,
         "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}}).rope
    model = _rotary_model(rope)
    short = np.arange(8, dtype=np.int64)[None]
    cos_short, _ = run_model(model, {"position_ids": short})
    expected = np.cos(np.outer(np.arange(8), rope.base_inv_freq()))
    np.testing.assert_allclose(cos_short[0], expected, atol=1e-6)
    long = np.arange(32, dtype=np.int64)[None]
    cos_long, _ = run_model(model, {"position_ids": long})
    assert np.abs(cos_long[0, :8] - cos_short[0]).max() > 1e-3


@pytest.mark.parametrize("dtype, np_dtype", [(ir.DataType.FLOAT16, np.float16)])
def test_tables_follow_the_build_dtype(dtype, np_dtype):
    rope = ArchitectureConfig.from_dict(
        {**_DIMS, "model_type": "llama", "max_position_embeddings": 64}).rope
    cos, sin = run_model(_rotary_model(rope, dtype), {"position_ids": _positions(40)})
    assert cos.dtype == sin.dtype == np_dtype
    ref_cos, ref_sin = run_model(_rotary_model(rope), {"position_ids": _positions(40)})
    np.testing.assert_allclose(cos.astype(np.float32), ref_cos, atol=1e-3)


# ---------------------------------------------------------------------------
# apply_rotary: the ONNX RotaryEmbedding op, full and partial
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("head_dim, rotary_dim", cases.APPLY)
def test_apply_rotary_matches_rotate_half_reference(head_dim, rotary_dim):
    recorded = load(cases, cases.apply_case(head_dim, rotary_dim))
    x, cos, sin = recorded["x"], recorded["cos"], recorded["sin"]
    batch, heads, seq, _ = x.shape
    model = component_model(
        inputs=[("x", ir.DataType.FLOAT, [batch, heads, seq, head_dim]),
                ("cos", ir.DataType.FLOAT, [batch, seq, rotary_dim // 2]),
                ("sin", ir.DataType.FLOAT, [batch, seq, rotary_dim // 2])],
        forward=lambda op, x_, c, s: apply_rotary(op, x_, c, s, rotary_dim, head_dim),
        outputs=["y"],
    )
    (y,) = run_model(model, {"x": x, "cos": cos, "sin": sin})
    expected = recorded["y"]  # testing/references.apply_rotary (rotate-half, in torch)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    if rotary_dim < head_dim:
        np.testing.assert_array_equal(y[..., rotary_dim:], x[..., rotary_dim:])
