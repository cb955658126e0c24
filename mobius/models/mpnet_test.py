"""MPNet (mobius/models/mpnet.py): the relative-position buckets equal transformers' for
every distance, a sequence longer than the bias' max distance keeps parity, and the bias
table's size is read as transformers reads it. Every family and pooling at sequence 9:
encoder_parity_test.py."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mobius import build
from mobius.errors import ConfigError
from mobius.models import mpnet
from mobius.models import mpnet_cases as cases
from mobius.models.mpnet_cases import LONG_PAD, LONG_ROWS, LONG_SEQ, RELATIVE
from testing import encoder_runs
from testing.encoder_runs import encoder_parity
from testing.model_runs import build_package, ort_session
from testing.reference_cases import case_dir


def _checkpoint(rows: int) -> str:
    return os.path.join(case_dir(cases, f"rows_{rows}"), "ckpt")


def test_buckets_equal_transformers_for_every_distance():
    expected = np.load(os.path.join(case_dir(cases, "buckets"), "buckets.npy"))
    table = mpnet.bucket_table()
    ahead = -RELATIVE
    ours = (ahead < 0) * (mpnet.BUCKETS // 2) + table[np.minimum(np.abs(ahead),
                                                                 mpnet.MAX_DISTANCE)]
    np.testing.assert_array_equal(ours, expected)
    assert len(set(expected[(RELATIVE >= 8) & (RELATIVE <= 128)])) > 4  # log-spaced range


@pytest.mark.parametrize("rows", LONG_ROWS)
def test_long_sequence_parity(rows, tmp_path):
    """Sequence 150 > max distance 128: exact, log-spaced and clamped buckets, both
    directions. 40 table rows: reading the row count as the bucket count (buckets 20
    per direction) moves every bias and fails."""
    built = build_package(_checkpoint(rows), tmp_path / "onnx")
    reference = encoder_runs.load(os.path.join(case_dir(cases, f"rows_{rows}"), "reference.npz"))
    run = encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), reference,
                         built.config, seq=LONG_SEQ, pad=LONG_PAD)
    assert run.diffs["last_hidden_state"] <= 1e-4, run.diffs


def test_fewer_table_rows_than_buckets_is_a_config_error():
    with pytest.raises(ConfigError, match="must be >= 32"):
        build(_checkpoint(16))
