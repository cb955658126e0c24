"""ModernBERT (mobius/models/modernbert.py, modernbert_heads.py): every config switch the
family reads keeps f32 parity with transformers where it matters, the hub spelling
(global_attn_every_n_layers, global/local_rope_theta, no layer_types) reads as
transformers 5's, and bad values are one-line errors. The tiny presets at sequence 9
(window 2 either side): encoder_parity_test.py."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mobius import build
from mobius.errors import ConfigError
from mobius.models import modernbert_cases as cases
from mobius.models.modernbert_cases import HUB_VALUES, SWITCHES, moves_feeds, respelled
from testing import encoder_runs
from testing.encoder_runs import encoder_parity
from testing.model_runs import build_package, ort_session
from testing.reference_cases import case_dir


def _parity(case: str, tmp_path):
    """The case's ckpt/ built, against transformers' recorded outputs (modernbert_cases.py)."""
    recorded = case_dir(cases, case)
    built = build_package(os.path.join(recorded, "ckpt"), tmp_path / "onnx")
    reference = encoder_runs.load(os.path.join(recorded, "reference.npz"))
    return encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), reference,
                          built.config)


@pytest.mark.parametrize("case", sorted(SWITCHES))
def test_switch_parity(case, tmp_path):
    run = _parity(case, tmp_path)
    assert max(run.diffs.values()) <= 1e-4, f"{case}: {run.diffs}"


@pytest.fixture(scope="module")
def base():
    return os.path.join(case_dir(cases, "base"), "ckpt")


@pytest.mark.parametrize("changed", [False, True], ids=["defaults", "every_value_changed"])
def test_hub_spelling_parity(changed, tmp_path):
    """The base checkpoint without layer_types / rope_parameters (hub spelling), its hub
    values at their defaults or each changed (modernbert_cases.hub_changes)."""
    run = _parity("hub_every_value_changed" if changed else "hub_defaults", tmp_path)
    assert run.diffs["last_hidden_state"] <= 1e-4, run.diffs


@pytest.mark.parametrize("key", sorted(HUB_VALUES))
def test_each_hub_value_moves_the_output(key):
    """Each value of the changed case alone moves transformers' output far beyond the
    parity tolerance, so a build that ignored it would fail test_hub_spelling_parity."""
    with np.load(os.path.join(case_dir(cases, f"moves_{key}"), "last_hidden_state.npz")) as out:
        before, after = out["before"], out["after"]
    real = moves_feeds()["attention_mask"] > 0
    assert np.abs(before - after)[real].max() > 1e-2, key


@pytest.mark.parametrize("changes,match", [
    ({"classifier_pooling": "max"}, "'cls' or 'mean'"),
    ({"local_attention": 0}, "local_attention"),
    ({"layer_types": ["full_attention", "chunked_attention", "full_attention"]}, "layer_types"),
    ({"norm_bias": "yes"}, "norm_bias"),
])
def test_bad_values_are_one_line_errors(changes, match, base, tmp_path):
    folder = respelled(base, str(tmp_path / "bad"), **changes)
    with pytest.raises(ConfigError, match=match):
        build(folder)
