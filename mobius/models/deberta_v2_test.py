"""DeBERTa-v2 (mobius/models/deberta_v2.py): the position buckets equal transformers' for
every distance, each attention / embedding switch keeps f32 parity where it matters,
a sequence past the bucket range keeps parity, and unsupported configs are one-line
errors. The tiny presets (DeBERTa-v3 style) at sequence 9: encoder_parity_test.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mobius import build
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import deberta_v2
from mobius.models import deberta_v2_cases as cases
from mobius.models.deberta_v2_cases import (BASE, BUCKETS, MLM_FEEDS, MOVES, SWITCHES,
                                            moves_mask, respelled)
from mobius.models.registry import family_for
from testing import encoder_runs
from testing.encoder_runs import encoder_parity
from testing.model_runs import build_package, ort_session
from testing.reference_cases import case_dir


@pytest.mark.parametrize("buckets,max_position", BUCKETS)
def test_buckets_equal_transformers_for_every_distance(buckets, max_position):
    with np.load(os.path.join(case_dir(cases, "buckets"), "buckets.npz")) as recorded:
        expected = recorded[f"{buckets}_{max_position}"]  # the row each term reads
    relative = np.arange(-3 * max_position, 3 * max_position + 1)
    table = deberta_v2.bucket_table(buckets, max_position)
    ours = np.sign(relative) * table[np.minimum(np.abs(relative), len(table) - 1)]
    np.testing.assert_array_equal(np.clip(ours + buckets, 0, 2 * buckets - 1), expected)


def test_masked_lm_checkpoint_builds_as_the_base_model(tmp_path):
    """A DebertaV2ForMaskedLM checkpoint (no family of its own) resolves by model_type to the
    base model: its ``deberta.`` body is read, its MLM head is declared ignorable, and the
    hidden states match transformers' body on a padded batch."""
    recorded = case_dir(cases, "mlm")
    folder = os.path.join(recorded, "ckpt")
    with open(os.path.join(folder, "config.json")) as f:
        assert family_for(json.load(f)) is BASE
    path = build(folder).save(str(tmp_path / "onnx"))
    session = ort_session(os.path.join(path, "model.onnx"))
    (hidden,) = session.run(None, MLM_FEEDS)
    expected = np.load(os.path.join(recorded, "last_hidden_state.npy"))
    real = MLM_FEEDS["attention_mask"].astype(bool)
    diff = np.abs(hidden - expected)[real].max()
    assert diff <= 1e-4, diff


@pytest.mark.parametrize("case", sorted(SWITCHES))
def test_switch_parity(case, tmp_path):
    _, _, seq = SWITCHES[case]
    recorded = case_dir(cases, case)
    built = build_package(os.path.join(recorded, "ckpt"), tmp_path / "onnx")
    reference = encoder_runs.load(os.path.join(recorded, "reference.npz"))
    run = encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), reference,
                         built.config, seq=seq, pad=seq // 3)
    assert run.diffs["logits"] <= 1e-4, f"{case}: {run.diffs}"


@pytest.fixture(scope="module")
def base():
    return os.path.join(case_dir(cases, "base"), "ckpt")


@pytest.mark.parametrize("key", sorted(MOVES))
def test_each_value_moves_the_output(key):
    """Each preset value matters on this batch: changing it alone moves transformers'
    logits far beyond the parity tolerance. (position_buckets sizes the table; its
    bucketing is checked against transformers' above.)"""
    with np.load(os.path.join(case_dir(cases, f"moves_{key}"), "logits.npz")) as logits:
        before, after = logits["before"], logits["after"]
    assert np.abs(before - after)[moves_mask() > 0].max() > 1e-2


@pytest.mark.parametrize("changes,error,match", [
    ({"conv_kernel_size": 3}, UnsupportedModelError, "conv_kernel_size"),
    ({"pos_att_type": ["p2p"]}, UnsupportedModelError, "pos_att_type"),
    ({"max_relative_positions": 3}, ConfigError, "must exceed"),
    ({"share_att_key": "yes"}, ConfigError, "share_att_key"),
])
def test_unsupported_configs_are_one_line_errors(changes, error, match, base, tmp_path):
    with pytest.raises(error, match=match):
        build(respelled(base, str(tmp_path / "bad"), **changes))
