"""The build graph matches the code: every first-party import has its Bazel dep, and every
Python file is in some target (see tools/deps_check.py)."""

from __future__ import annotations

import os

from tools.build_graph import BuildGraph
from tools.deps_check import missing_deps

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the source tree


def test_every_import_has_its_bazel_dep():
    problems = missing_deps(ROOT)
    assert problems == [], "\n".join(problems)


def test_check_finds_a_missing_dep(tmp_path):
    """The check can fail: a copy of one package with a dep removed is reported."""
    (tmp_path / "mobius").mkdir()
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "mobius" / "BUILD.bazel").write_text(
        'py_library(name = "errors", srcs = ["errors.py"])\n'
        'py_library(name = "builder", srcs = ["builder.py"], deps = [])\n')
    (tmp_path / "mobius" / "errors.py").write_text("class MobiusError(Exception): pass\n")
    (tmp_path / "mobius" / "builder.py").write_text("from mobius.errors import MobiusError\n")
    (tmp_path / "mobius" / "orphan.py").write_text("")
    problems = missing_deps(str(tmp_path), BuildGraph(str(tmp_path)))
    assert problems == [
        "mobius/orphan.py: in no Bazel target's srcs",
        "mobius/builder.py:1: //mobius:builder imports mobius.errors but does not depend on "
        "//mobius:errors",
    ]
