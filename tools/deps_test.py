"""The build graph matches the code: every first-party import has its Bazel dep, every dep an
import, every Python file is in some target, every bundled test runs in its package's
bundle, and every package's files are in //:source_tree (see tools/deps_check.py)."""

from __future__ import annotations

import os
import shutil

from tools.build_graph import BuildGraph
from tools.deps_check import (missing_deps, packages_outside_the_tree, unrun_tests,
                              unused_deps)

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_import_has_its_bazel_dep():
    problems = missing_deps(ROOT)
    assert problems == [], "\n".join(problems)


def test_every_bazel_dep_has_its_import():
    problems = unused_deps(ROOT)
    assert problems == [], "\n".join(problems)


def test_check_finds_a_missing_dep(tmp_path):
    """The check can fail: a copy of one package with a dep removed is reported, and an
    import of a module the tree does not hold."""
    (tmp_path / "mobius").mkdir()
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "mobius" / "BUILD.bazel").write_text(
        'py_library(name = "errors", srcs = ["errors.py"])\n'
        'py_library(name = "builder", srcs = ["builder.py"], deps = [])\n')
    (tmp_path / "mobius" / "errors.py").write_text("class MobiusError(Exception): pass\n")
    (tmp_path / "mobius" / "builder.py").write_text(
        "from mobius.errors import MobiusError\nimport mobius.undeclared\n")
    (tmp_path / "mobius" / "orphan.py").write_text("")
    problems = missing_deps(str(tmp_path), BuildGraph(str(tmp_path)))
    assert problems == [
        "mobius/orphan.py: in no Bazel target's srcs",
        "mobius/builder.py:1: //mobius:builder imports mobius.errors but does not depend on "
        "//mobius:errors",
        # under Bazel, a module of a package //:source_tree leaves out
        "mobius/builder.py:2: //mobius:builder imports mobius.undeclared, a module of no file "
        "in the tree (//:source_tree)",
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
    are reported; with it, the bundle runs them, not the one with args."""
    _real_macros(tmp_path)
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "pkg").mkdir()
    tests = ('load("//rules:defs.bzl", "mobius_py_test", "test_bundle")\n'
             'mobius_py_test(name = "a_test", srcs = ["a_test.py"])\n'
             'mobius_py_test(name = "b_test", srcs = ["b_test.py"])\n'
             'mobius_py_test(name = "c_test", srcs = ["c_test.py"], args = ["-k", "x"])\n')
    (tmp_path / "pkg" / "BUILD.bazel").write_text(tests)
    assert unrun_tests(BuildGraph(str(tmp_path))) == [
        f"//pkg:{name}_test is bundled but no test_bundle() of //pkg runs it" for name in "ab"]
    (tmp_path / "pkg" / "BUILD.bazel").write_text(tests + "test_bundle()\n")
    graph = BuildGraph(str(tmp_path))
    assert unrun_tests(graph) == []
    bundle = graph.targets["//pkg:tests"]
    assert bundle.attrs["args"] == ["$(rootpath a_test.py)", "$(rootpath b_test.py)"]
    assert "manual" not in graph.targets["//pkg:c_test"].tags


def test_every_package_is_in_the_source_tree():
    problems = packages_outside_the_tree(BuildGraph(ROOT))
    assert problems == [], "\n".join(problems)


def test_check_finds_a_package_outside_the_source_tree(tmp_path):
    """With the real macros: a package without package_files(), and one whose files
    //:source_tree does not list, are named (a test reading the tree would miss them)."""
    _real_macros(tmp_path)
    load = 'load("//rules:defs.bzl", "package_files", "source_tree")\n'
    (tmp_path / "BUILD.bazel").write_text(
        load + 'source_tree(name = "source_tree", srcs = [":package_files", '
        '"//pkg:package_files", "//rules:package_files"])\npackage_files()\n')
    for name in ("pkg", "new", "bare"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "BUILD.bazel").write_text(load + "package_files()\n")
    (tmp_path / "bare" / "BUILD.bazel").write_text("")
    assert packages_outside_the_tree(BuildGraph(str(tmp_path))) == [
        "//bare calls no package_files() (//rules:defs.bzl), so //:source_tree cannot list its "
        "files",
        "//new:package_files is not in //:source_tree (BUILD.bazel): the tests that read the "
        "source tree miss its files",
    ]


def test_package_files_are_the_package_s_own(tmp_path):
    """package_files() globs as Bazel does: hidden files too, no cache, nothing of a
    subpackage; and it owns none of them (an orphan module is still one)."""
    _real_macros(tmp_path)
    (tmp_path / "BUILD.bazel").write_text("")
    pkg = tmp_path / "pkg"
    for folder in ("data", "__pycache__", "sub"):
        (pkg / folder).mkdir(parents=True)
    (pkg / "BUILD.bazel").write_text('load("//rules:defs.bzl", "package_files")\n'
                                     "package_files()\n")
    for path in ("a.py", ".hidden", "data/x.json", "__pycache__/a.pyc", "sub/b.txt"):
        (pkg / path).write_text("")
    (pkg / "sub" / "BUILD.bazel").write_text("")
    graph = BuildGraph(str(tmp_path))
    files = graph.targets["//pkg:package_files"]
    assert files.srcs == []
    assert files.deps == ["//pkg:.hidden", "//pkg:BUILD.bazel", "//pkg:a.py",
                          "//pkg:data/x.json"]
    assert missing_deps(str(tmp_path), graph) == ["pkg/a.py: in no Bazel target's srcs"]


def _real_macros(tmp_path):
    """//rules of this tree (its .bzl files) in the throwaway tree at ``tmp_path``."""
    shutil.copytree(os.path.join(ROOT, "rules"), tmp_path / "rules",
                    ignore=shutil.ignore_patterns("BUILD.bazel", "*.py"))
    (tmp_path / "rules" / "BUILD.bazel").write_text(
        'load("//rules:defs.bzl", "package_files")\npackage_files()\n')
