"""RopeConfig frequencies and scaling against transformers' own RoPE code, and
end-to-end logit parity for every RoPE variant mobius supports.

The reference is ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``
called on a real ``LlamaConfig``; the mobius side goes through
``ArchitectureConfig.from_dict(config.to_dict())``, i.e. the same path a
checkpoint's config.json takes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import torch
import transformers

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from mobius.config.architecture import ArchitectureConfig
from mobius.config.rope import RopeConfig
from mobius.errors import ConfigError
from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint
from testing.model_runs import build_package, f32_parity

_DIMS = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=172,
             num_hidden_layers=2, vocab_size=1031, max_position_embeddings=256)

_SHORT = [float(x) for x in np.linspace(1.0, 2.0, 8)]
_LONG = [float(x) for x in np.linspace(1.0, 8.0, 8)]

VARIANTS = {
    "linear": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    "linear_partial": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                       "partial_rotary_factor": 0.5},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
               "rope_theta": 500000.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
             "rope_theta": 10000.0},
    "yarn_betas": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                   "rope_theta": 10000.0, "beta_fast": 16.0, "beta_slow": 2.0},
    "yarn_mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                    "rope_theta": 10000.0, "mscale": 1.0, "mscale_all_dim": 0.5},
    "yarn_mscale_equal": {"rope_type": "yarn", "factor": 40.0,
                          "original_max_position_embeddings": 64, "rope_theta": 10000.0,
                          "mscale": 0.707, "mscale_all_dim": 0.707},
    "yarn_attention_factor": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.8,
                              "original_max_position_embeddings": 64, "rope_theta": 10000.0},
    "yarn_no_truncate": {"rope_type": "yarn", "factor": 4.0, "truncate": False,
                         "original_max_position_embeddings": 64, "rope_theta": 10000.0},
    "yarn_partial": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                     "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "longrope": {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 64,
                 "rope_theta": 10000.0, "short_factor": _SHORT, "long_factor": _LONG},
    "longrope_no_factor": {"rope_type": "longrope", "original_max_position_embeddings": 64,
                           "rope_theta": 10000.0, "short_factor": _SHORT, "long_factor": _LONG},
}


def _hf_config(rope_parameters: dict):
    return transformers.LlamaConfig(**_DIMS, rope_parameters=dict(rope_parameters))


def _mobius_rope(hf_config) -> RopeConfig:
    return ArchitectureConfig.from_dict(hf_config.to_dict()).rope


def _hf_inv_freq(hf_config, seq_len=None):
    rope_type = hf_config.rope_parameters["rope_type"]
    if rope_type == "default":
        inv_freq, scaling = LlamaRotaryEmbedding.compute_default_rope_parameters(hf_config)
    else:
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](hf_config, None, seq_len=seq_len)
    return inv_freq.double().numpy(), float(scaling)


# ---------------------------------------------------------------------------
# Frequencies and scaling (pure numpy vs transformers)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_inv_freq_and_attention_scaling_match_transformers(variant):
    hf_config = _hf_config(VARIANTS[variant])
    expected_inv_freq, expected_scaling = _hf_inv_freq(hf_config)
    rope = _mobius_rope(hf_config)
    assert rope.rope_type == VARIANTS[variant]["rope_type"]
    np.testing.assert_allclose(rope.inv_freq(), expected_inv_freq, rtol=1e-6, atol=0)
    assert rope.attention_scaling() == pytest.approx(expected_scaling, rel=1e-6)


def test_default_rope_matches_transformers():
    hf_config = _hf_config({"rope_type": "default", "rope_theta": 12345.0})
    expected, scaling = _hf_inv_freq(hf_config)
    rope = _mobius_rope(hf_config)
    np.testing.assert_allclose(rope.inv_freq(), expected, rtol=1e-6, atol=0)
    assert rope.attention_scaling() == scaling == 1.0


def test_variants_really_differ_from_default():
    """Guards the tests above: each variant must change something vs plain RoPE."""
    default = _mobius_rope(_hf_config({"rope_type": "default", "rope_theta": 10000.0}))
    for name, params in VARIANTS.items():
        if params["rope_type"] == "dynamic" or "partial" in name:
            continue  # dynamic equals default at the base length (tested below)
        rope = _mobius_rope(_hf_config(params))
        changed = not np.allclose(rope.inv_freq(), default.base_inv_freq(params["rope_theta"]),
                                  rtol=1e-3) or rope.attention_scaling() != 1.0
        assert changed, name


def test_dynamic_at_base_length_is_default():
    hf_config = _hf_config(VARIANTS["dynamic"])
    expected, _ = _hf_inv_freq(hf_config, seq_len=None)
    rope = _mobius_rope(hf_config)
    assert rope.is_dynamic
    np.testing.assert_allclose(rope.inv_freq(), expected, rtol=1e-6, atol=0)
    np.testing.assert_allclose(rope.inv_freq(), rope.base_inv_freq(), rtol=0, atol=0)


def test_longrope_long_factors_match_transformers():
    hf_config = _hf_config(VARIANTS["longrope"])
    original = VARIANTS["longrope"]["original_max_position_embeddings"]
    expected_long, _ = _hf_inv_freq(hf_config, seq_len=original + 1)
    rope = _mobius_rope(hf_config)
    np.testing.assert_allclose(rope.longrope_inv_freq(rope.long_factor), expected_long, rtol=1e-6)


@pytest.mark.parametrize("variant", ["linear", "llama3", "yarn", "yarn_mscale", "longrope"])
def test_cos_sin_cache_matches_transformers_rotary_embedding(variant):
    """The precomputed tables == LlamaRotaryEmbedding's cos/sin (scaling included)."""
    hf_config = _hf_config(VARIANTS[variant])
    rotary = LlamaRotaryEmbedding(hf_config)
    positions = torch.arange(0, 64)[None]  # within original_max_position_embeddings
    with torch.no_grad():
        hf_cos, hf_sin = rotary(torch.zeros(1, dtype=torch.float32), positions)
    cos, sin = _mobius_rope(hf_config).cos_sin_cache()
    half = cos.shape[1]
    # Angles reach ~63 rad, where one float32 ulp is 3.8e-6: both sides round the
    # angle to float32 (in a different order), so allow a few ulps.
    np.testing.assert_allclose(cos[:64], hf_cos[0, :, :half].numpy(), rtol=0, atol=1.5e-5)
    np.testing.assert_allclose(sin[:64], hf_sin[0, :, :half].numpy(), rtol=0, atol=1.5e-5)
    # rotate-half layout: the second half repeats the first.
    np.testing.assert_array_equal(hf_cos[0, :, :half].numpy(), hf_cos[0, :, half:].numpy())
    assert cos.dtype == np.float32 and cos.shape == (256, half)


def test_longrope_wrong_factor_count_is_a_config_error():
    from mobius.errors import ConfigError

    rope = ArchitectureConfig.from_dict({
        **_DIMS, "model_type": "llama",
        "rope_parameters": {"rope_type": "longrope", "short_factor": [1.0] * 3,
                            "long_factor": [1.0] * 3, "original_max_position_embeddings": 64},
    }).rope
    with pytest.raises(ConfigError, match="8 entries"):
        rope.inv_freq()


# ---------------------------------------------------------------------------
# End to end: mobius vs transformers logits for each variant
# ---------------------------------------------------------------------------

# max_position_embeddings 16 so that a 20-token prompt crosses it: dynamic NTK then
# recomputes its frequencies in the graph; LongRoPE switches to its long factors past
# original_max_position_embeddings.
E2E = {
    "dynamic": (dict(max_position_embeddings=16,
                     rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                      "rope_theta": 10000.0}), 20),
    "linear": (dict(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                     "rope_theta": 10000.0}), 10),
    "llama3": (dict(rope_parameters=VARIANTS["llama3"]), 10),
    "yarn": (dict(rope_parameters=VARIANTS["yarn_mscale"]), 10),
    "yarn_no_truncate": (dict(rope_parameters=VARIANTS["yarn_no_truncate"]), 10),
    "longrope": (dict(max_position_embeddings=64,
                      rope_parameters={"rope_type": "longrope", "factor": 4.0,
                                       "original_max_position_embeddings": 16,
                                       "rope_theta": 10000.0,
                                       "short_factor": _SHORT, "long_factor": _LONG}), 20),
}


@pytest.fixture(scope="module", params=sorted(E2E))
def e2e_case(request, tmp_path_factory):
    overrides, prompt_len = E2E[request.param]
    root = tmp_path_factory.mktemp(request.param)
    checkpoint = make_hf_checkpoint(str(root / "ckpt"), "tiny-llama", **overrides)
    built = build_package(checkpoint, root / "onnx")
    return request.param, built, load_hf_model(checkpoint), prompt_len


def test_end_to_end_logit_parity(e2e_case):
    name, built, hf_model, prompt_len = e2e_case
    assert built.config.rope.rope_type == E2E[name][0]["rope_parameters"]["rope_type"]
    run = f32_parity(built, hf_model, prompt_len=prompt_len, steps=3, pad=3)
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
