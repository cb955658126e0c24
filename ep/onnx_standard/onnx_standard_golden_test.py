"""L5 golden op-histogram snapshots for the onnx-standard EP: ep/onnx_standard/golden/<family>.json.

Every family's tiny checkpoint is built for onnx-standard at its primary dtype and
its op histogram must equal the snapshot; a difference fails with a per-op
diff. Regenerate intended changes with
``./bazelw run //tools:golden -- --update --ep onnx-standard`` (testing/golden.py).
"""

import pytest

from testing import ep_suite as s, golden
from testing.ep_suite import builds  # noqa: F401  (module-scoped fixture)

EP = "onnx-standard"


@pytest.mark.parametrize("family", s.family_params(s.ep_family_names(EP)))
def test_golden(builds, family):  # noqa: F811
    snap = golden.snapshot(builds.get(family, EP, s.primary_dtype(EP)))
    lines = golden.diff(golden.load(golden.golden_path(EP, family)), snap)
    assert not lines, golden.failure_message(EP, family, lines)


def test_no_stale_snapshots():
    stale = golden.stale_files(EP, s.ep_family_names(EP))
    assert not stale, (f"golden files of unknown families in ep/onnx_standard/golden: "
                       f"{stale}; remove them with "
                       f"./bazelw run //tools:golden -- --update --ep onnx-standard")
