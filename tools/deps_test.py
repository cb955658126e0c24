"""The build graph matches the code: every first-party import has its Bazel dep, every dep an
import, every Python file is in some target, and every bundled test runs in its package's
bundle (see tools/deps_check.py)."""

from __future__ import annotations

import os
import shutil

from tools.build_graph import BuildGraph
from tools.deps_check import missing_deps, unrun_tests, unused_deps

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


def test_every_bundled_test_runs_in_its_bundle():
    problems = unrun_tests(BuildGraph(ROOT))
    assert problems == [], "\n".join(problems)


def test_check_finds_a_bundled_test_no_bundle_runs(tmp_path):
    """With the real macros: small tests are bundled (manual); without test_bundle() they
    are reported; with it, the bundle runs them, not the one with args, and the external
    one in a bundle of its own."""
    shutil.copytree(os.path.join(ROOT, "rules"), tmp_path / "rules",
                    ignore=shutil.ignore_patterns("BUILD.bazel", "*.py"))
    (tmp_path / "rules" / "BUILD.bazel").write_text("")
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "pkg").mkdir()
    tests = ('load("//rules:defs.bzl", "mobius_py_test", "test_bundle")\n'
             'mobius_py_test(name = "a_test", srcs = ["a_test.py"])\n'
             'mobius_py_test(name = "b_test", srcs = ["b_test.py"])\n'
             'mobius_py_test(name = "c_test", srcs = ["c_test.py"], args = ["-k", "x"])\n'
             'mobius_py_test(name = "d_test", srcs = ["d_test.py"], tags = ["external"])\n')
    (tmp_path / "pkg" / "BUILD.bazel").write_text(tests)
    assert unrun_tests(BuildGraph(str(tmp_path))) == [
        f"//pkg:{name}_test is bundled but no test_bundle() of //pkg runs it" for name in "abd"]
    (tmp_path / "pkg" / "BUILD.bazel").write_text(tests + "test_bundle()\n")
    graph = BuildGraph(str(tmp_path))
    assert unrun_tests(graph) == []
    bundle = graph.targets["//pkg:tests"]
    assert bundle.attrs["args"] == ["$(rootpath a_test.py)", "$(rootpath b_test.py)"]
    assert "manual" not in graph.targets["//pkg:c_test"].tags
    # a test that reads the source tree reruns every time: its bundle is its own
    assert graph.targets["//pkg:tests_external"].attrs["args"] == ["$(rootpath d_test.py)"]
    assert "external" in graph.targets["//pkg:tests_external"].tags
