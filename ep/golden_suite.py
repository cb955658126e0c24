"""L5 golden op-histogram snapshots of one EP: the shared suite.

``ep/<name>/<name>_golden_test.py`` instantiates it with
``globals().update(golden_suite.tests_for("<ep>"))``. Every family's tiny
checkpoint is built for the EP at its primary dtype and its op histogram must
equal ``ep/<name>/golden/<family>.json``; a difference fails with a per-op
diff. Regenerate intended changes with
``./bazelw run //tools:golden -- --update --ep <name>`` (testing/golden.py).
"""

from __future__ import annotations

from typing import Callable

import pytest

from testing import ep_suite as s, golden


def tests_for(ep: str) -> dict[str, Callable]:
    """The test functions for ``ep`` (to put in a test module's globals)."""

    @pytest.mark.parametrize("family", s.family_params(s.ep_family_names(ep)))
    def test_golden(builds, family):
        snap = golden.snapshot(builds.get(family, ep, s.primary_dtype(ep)))
        lines = golden.diff(golden.load(golden.golden_path(ep, family)), snap)
        assert not lines, golden.failure_message(ep, family, lines)

    def test_no_stale_snapshots():
        stale = golden.stale_files(ep, s.ep_family_names(ep))
        assert not stale, (f"golden files of unknown families for {ep}: {stale}; remove them "
                           f"with ./bazelw run //tools:golden -- --update --ep {ep}")

    return {"test_golden": test_golden, "test_no_stale_snapshots": test_no_stale_snapshots}
