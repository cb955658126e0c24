"""MPNet (mobius/models/mpnet.py): the relative-position buckets equal transformers' for
every distance, a sequence longer than the bias' max distance keeps parity, and the bias
table's size is read as transformers reads it. Every family and pooling at sequence 9:
encoder_parity_test.py."""

from __future__ import annotations

import os

import numpy as np
import pytest

import torch

from mobius import build
from mobius.errors import ConfigError
from mobius.models import mpnet
from testing.encoder_runs import encoder_parity
from testing.model_runs import build_package, make_family_checkpoint, ort_session


def test_buckets_equal_transformers_for_every_distance():
    from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

    relative = np.arange(-400, 401)  # key - query, past the max distance both ways
    expected = MPNetEncoder.relative_position_bucket(torch.from_numpy(relative)).numpy()
    table = mpnet.bucket_table()
    ahead = -relative
    ours = (ahead < 0) * (mpnet.BUCKETS // 2) + table[np.minimum(np.abs(ahead),
                                                                 mpnet.MAX_DISTANCE)]
    np.testing.assert_array_equal(ours, expected)
    assert len(set(expected[(relative >= 8) & (relative <= 128)])) > 4  # log-spaced range


@pytest.mark.parametrize("rows", [32, 40])
def test_long_sequence_parity(rows, tmp_path):
    """Sequence 150 > max distance 128: exact, log-spaced and clamped buckets, both
    directions. 40 table rows: reading the row count as the bucket count (buckets 20
    per direction) moves every bias and fails."""
    family = mpnet.FAMILY
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), family,
                                    relative_attention_num_buckets=rows)
    built = build_package(folder, tmp_path / "onnx")
    run = encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), folder,
                         built.config, seq=150, pad=40)
    assert run.diffs["last_hidden_state"] <= 1e-4, run.diffs


def test_fewer_table_rows_than_buckets_is_a_config_error(tmp_path):
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), mpnet.FAMILY,
                                    relative_attention_num_buckets=16)
    with pytest.raises(ConfigError, match="must be >= 32"):
        build(folder)
