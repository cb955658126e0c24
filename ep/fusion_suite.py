"""L2 fusion coverage of one EP: the shared suite.

``ep/<name>/<name>_fusion_test.py`` holds only the EP's expectation tables and
instantiates the tests with
``globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS,
ENCODER_EXPECTATIONS))``, so an EP's fusion file is data: which checks
(testing/ep_suite.py) hold for each build dtype, and the known gaps (strict
xfails naming the missing rule).
"""

from __future__ import annotations

from typing import Callable

import pytest

from testing import ep_suite as s


def tests_for(ep: str, expectations: dict[str, tuple[s.Check, ...]],
              known_gaps: dict[tuple[str, str, str], str] | None = None,
              encoder_expectations: dict[str, tuple[s.Check, ...]] | None = None,
              ) -> dict[str, Callable]:
    """The test functions for ``ep``'s tables (to put in a test module's globals)."""

    @pytest.mark.parametrize("family,dtype,check", s.fusion_params(
        ep, expectations, known_gaps, encoder_expectations))
    def test_expectation(builds, family, dtype, check):
        s.assert_check(builds, ep, family, dtype, check)

    def test_table_covers_the_ep_dtypes():
        assert set(expectations) == s.expected_dtypes(ep)

    return {"test_expectation": test_expectation,
            "test_table_covers_the_ep_dtypes": test_table_covers_the_ep_dtypes}
