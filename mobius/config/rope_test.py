"""RopeConfig frequencies and scaling against transformers' own RoPE code, and
end-to-end logit parity for every RoPE variant mobius supports.

The reference is ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``
called on a real ``LlamaConfig``; the mobius side goes through
``ArchitectureConfig.from_dict(config.to_dict())``, i.e. the same path a
checkpoint's config.json takes. transformers' side is computed at build time
(rope_cases.py); this file reads it.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from mobius.config import rope_cases as cases
from mobius.config.architecture import ArchitectureConfig
from mobius.config.rope import RopeConfig
from mobius.config.rope_cases import (COS_SIN_POSITIONS, COS_SIN_VARIANTS, DIMS, E2E,
                                      VARIANTS)
from mobius.errors import ConfigError
from testing.checkpoint_runs import checkpoint, reference
from testing.model_runs import build_package, f32_parity
from testing.reference_cases import case_dir


@pytest.fixture(scope="module")
def hf():
    """transformers' side: (name -> LlamaConfig.to_dict(), name -> rope.npz array)."""
    folder = case_dir(cases, "transformers")
    with open(os.path.join(folder, "configs.json")) as f:
        configs = json.load(f)
    with np.load(os.path.join(folder, "rope.npz")) as data:
        arrays = {name: data[name] for name in data.files}
    return configs, arrays


def _mobius_rope(config_dict: dict) -> RopeConfig:
    return ArchitectureConfig.from_dict(config_dict).rope


def _hf_inv_freq(hf, name: str):
    _, arrays = hf
    return arrays[f"inv_freq_{name}"], float(arrays[f"scaling_{name}"])


# ---------------------------------------------------------------------------
# Frequencies and scaling (pure numpy vs transformers)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_inv_freq_and_attention_scaling_match_transformers(hf, variant):
    expected_inv_freq, expected_scaling = _hf_inv_freq(hf, variant)
    rope = _mobius_rope(hf[0][variant])
    assert rope.rope_type == VARIANTS[variant]["rope_type"]
    np.testing.assert_allclose(rope.inv_freq(), expected_inv_freq, rtol=1e-6, atol=0)
    assert rope.attention_scaling() == pytest.approx(expected_scaling, rel=1e-6)


def test_default_rope_matches_transformers(hf):
    expected, scaling = _hf_inv_freq(hf, "default")  # rope_theta 12345
    rope = _mobius_rope(hf[0]["default"])
    np.testing.assert_allclose(rope.inv_freq(), expected, rtol=1e-6, atol=0)
    assert rope.attention_scaling() == scaling == 1.0


def test_variants_really_differ_from_default(hf):
    """Guards the tests above: each variant must change something vs plain RoPE."""
    configs, _ = hf
    default = _mobius_rope(configs["default_10000"])
    for name, params in VARIANTS.items():
        if params["rope_type"] == "dynamic" or "partial" in name:
            continue  # dynamic equals default at the base length (tested below)
        rope = _mobius_rope(configs[name])
        changed = not np.allclose(rope.inv_freq(), default.base_inv_freq(params["rope_theta"]),
                                  rtol=1e-3) or rope.attention_scaling() != 1.0
        assert changed, name


def test_dynamic_at_base_length_is_default(hf):
    expected, _ = _hf_inv_freq(hf, "dynamic")  # seq_len None: the base length
    rope = _mobius_rope(hf[0]["dynamic"])
    assert rope.is_dynamic
    np.testing.assert_allclose(rope.inv_freq(), expected, rtol=1e-6, atol=0)
    np.testing.assert_allclose(rope.inv_freq(), rope.base_inv_freq(), rtol=0, atol=0)


def test_longrope_long_factors_match_transformers(hf):
    """transformers' frequencies at original_max_position_embeddings + 1 positions."""
    configs, arrays = hf
    expected_long = arrays["long_inv_freq_longrope"]
    rope = _mobius_rope(configs["longrope"])
    np.testing.assert_allclose(rope.longrope_inv_freq(rope.long_factor), expected_long, rtol=1e-6)


@pytest.mark.parametrize("variant", COS_SIN_VARIANTS)
def test_cos_sin_cache_matches_transformers_rotary_embedding(hf, variant):
    """The precomputed tables == LlamaRotaryEmbedding's cos/sin (scaling included), over
    positions 0..63, within original_max_position_embeddings."""
    configs, arrays = hf
    hf_cos, hf_sin = arrays[f"cos_{variant}"], arrays[f"sin_{variant}"]
    assert hf_cos.shape[0] == COS_SIN_POSITIONS == 64
    cos, sin = _mobius_rope(configs[variant]).cos_sin_cache()
    half = cos.shape[1]
    # Angles reach ~63 rad, where one float32 ulp is 3.8e-6: both sides round the
    # angle to float32 (in a different order), so allow a few ulps.
    np.testing.assert_allclose(cos[:64], hf_cos[:, :half], rtol=0, atol=1.5e-5)
    np.testing.assert_allclose(sin[:64], hf_sin[:, :half], rtol=0, atol=1.5e-5)
    # rotate-half layout: the second half repeats the first.
    np.testing.assert_array_equal(hf_cos[:, :half], hf_cos[:, half:])
    assert cos.dtype == np.float32 and cos.shape == (256, half)


def test_longrope_wrong_factor_count_is_a_config_error():
    from mobius.errors import ConfigError

    rope = ArchitectureConfig.from_dict({
        **DIMS, "model_type": "llama",
        "rope_parameters": {"rope_type": "longrope", "short_factor": [1.0] * 3,
                            "long_factor": [1.0] * 3, "original_max_position_embeddings": 64},
    }).rope
    with pytest.raises(ConfigError, match="8 entries"):
        rope.inv_freq()


# ---------------------------------------------------------------------------
# End to end: mobius vs transformers logits for each variant
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module", params=sorted(E2E))
def e2e_case(request, tmp_path_factory):
    case = f"e2e_{request.param}"
    built = build_package(checkpoint(cases, case), tmp_path_factory.mktemp(request.param))
    return request.param, built, reference(cases, case), E2E[request.param][1]


def test_end_to_end_logit_parity(e2e_case):
    name, built, hf_run, prompt_len = e2e_case
    assert built.config.rope.rope_type == E2E[name][0]["rope_parameters"]["rope_type"]
    assert hf_run.input_ids.shape[1] == prompt_len
    run = f32_parity(built, hf_run, steps=3)
    assert run.max_abs_diff <= 1e-4, f"{name}: max |logit diff| {run.max_abs_diff}"
    rope = built.config.rope
    if rope.is_dynamic:
        # The prompt must cross the length where the frequencies change, else the
        # in-graph switch/recomputation is never exercised.
        threshold = (rope.original_max_position_embeddings if rope.rope_type == "longrope"
                     else rope.max_position_embeddings)
        assert prompt_len > threshold


@pytest.mark.parametrize("raw,fragment", [
    ({"max_position_embeddings": 1 << 24}, "GiB of RoPE tables"),  # 16M x 128 dims: 16 GiB
    ({"max_position_embeddings": (1 << 24) + 1}, "more than mobius accepts"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                       "high_freq_factor": 4.0}}, "high_freq_factor > low_freq_factor"),
    ({"partial_rotary_factor": 1.5}, "must be in (0, 1]"),
    ({"rope_theta": "10000"}, "'rope_theta' must be a number"),
    ({"rope_scaling": {"rope_type": "linear", "factor": -2.0}}, "'factor' must be a positive"),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, "x"],
                       "long_factor": [1.0]}}, "'short_factor' must be a number"),
])
def test_hostile_rope_values_are_refused_before_any_table(raw, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        RopeConfig.from_hf(raw, head_dim=256)


def test_a_128k_context_table_is_accepted():
    rope = RopeConfig.from_hf({"max_position_embeddings": 131072}, head_dim=128)
    assert rope.max_position_embeddings == 131072
