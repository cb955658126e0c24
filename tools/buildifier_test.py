"""Every BUILD / .bzl file is as buildifier formats it (tools/buildifier.py); fix with
./bazelw run //tools:buildifier."""

from __future__ import annotations

import os

from tools.buildifier import build_files, run

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_build_files_are_formatted():
    result = run(ROOT, check=True)
    assert result.returncode == 0, (
        f"not formatted (./bazelw run //tools:buildifier):\n{result.stdout}{result.stderr}")


def test_check_catches_unsorted_deps(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "BUILD.bazel").write_text(
        'py_library(\n    name = "a",\n    deps = [\n        ":z",\n        ":b",\n    ],\n)\n')
    (tmp_path / "bazel-out").mkdir()  # a convenience link's tree is not ours to format
    (tmp_path / "bazel-out" / "BUILD").write_text("x=[ 1 ]\n")
    assert build_files(str(tmp_path)) == [str(tmp_path / "pkg" / "BUILD.bazel")]
    result = run(str(tmp_path), check=True)
    assert result.returncode != 0 and "pkg/BUILD.bazel" in result.stdout + result.stderr
    assert run(str(tmp_path), check=False).returncode == 0
    assert run(str(tmp_path), check=True).returncode == 0
