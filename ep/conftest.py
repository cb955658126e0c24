"""pytest fixtures of the per-EP suites (ep/<name>/*_test.py); pytest finds this file for
every test under ep/, so the test modules name the fixture without importing it."""

from __future__ import annotations

import pytest

from testing.ep_suite import Builds, Checkpoints


@pytest.fixture(scope="session")
def builds(tmp_path_factory) -> Builds:
    """Checkpoints and builds shared by all tests of the process: an EP's fusion, parity
    and golden modules run in one (rules/ep_suite.bzl) and parse each build once."""
    return Builds(Checkpoints(tmp_path_factory.mktemp("checkpoints")))
