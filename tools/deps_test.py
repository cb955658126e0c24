"""The build graph matches the code: every first-party import has its Bazel dep, every dep an
import, and every Python file is in some target (see tools/deps_check.py)."""

from __future__ import annotations

import os

from tools.build_graph import BuildGraph
from tools.deps_check import missing_deps, unused_deps

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the source tree


def test_every_import_has_its_bazel_dep():
    problems = missing_deps(ROOT)
    assert problems == [], "\n".join(problems)


def test_every_bazel_dep_has_its_import():
    problems = unused_deps(ROOT)
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


def test_check_finds_an_unused_dep(tmp_path):
    """The check can fail the other way: deps no import reaches (first- and third-party) are
    reported; the package's own __init__.py and a pytest runner's imports count as used."""
    (tmp_path / "mobius").mkdir()
    (tmp_path / "third_party").mkdir()
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "third_party" / "BUILD.bazel").write_text(
        'py_library(name = "numpy", tags = ["pip:numpy"])\n'
        'py_library(name = "pillow", tags = ["pip:pillow"])\n')
    (tmp_path / "mobius" / "BUILD.bazel").write_text(
        'py_library(name = "init", srcs = ["__init__.py"])\n'
        'py_library(name = "errors", srcs = ["errors.py"], deps = [":init"])\n'
        'py_library(name = "builder", srcs = ["builder.py"],\n'
        '           deps = [":errors", ":init", "//third_party:numpy", "//third_party:pillow"])\n')
    (tmp_path / "mobius" / "__init__.py").write_text("")
    (tmp_path / "mobius" / "errors.py").write_text("")
    (tmp_path / "mobius" / "builder.py").write_text("from PIL import Image\n")
    assert unused_deps(str(tmp_path), BuildGraph(str(tmp_path))) == [
        "//mobius:builder depends on //mobius:errors but imports none of its modules",
        "//mobius:builder depends on //third_party:numpy but imports none of its modules",
    ]
