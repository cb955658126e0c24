"""rules/eps.bzl and ep/<name>/BUILD.bazel are what //tools:eps writes from the EP files, and a
new EP's entries come from its capabilities file and its fusion table alone."""

from __future__ import annotations

import os
import subprocess
import sys

from mobius.ep.capabilities import EpCapabilities
from tools.eps import SUITE_BUILD, render, suite_problems

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_eps_bzl_and_the_suite_builds_are_current():
    """Run on the whole tree (//:source_tree, not only the EP files the deps' libraries
    list), so a new EP file makes this fail until the files are updated."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("BUILD_WORKSPACE_DIRECTORY", None)
    run = subprocess.run([sys.executable, "-m", "tools.eps"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def _workspace(tmp_path):
    """A workspace with mobius/ep's hand-written targets, one EP file and its fusion table."""
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "third_party").mkdir()
    (tmp_path / "third_party" / "BUILD.bazel").write_text('py_library(name = "onnx_ir")\n')
    ep = tmp_path / "mobius" / "ep"
    ep.mkdir(parents=True)
    (tmp_path / "mobius" / "__init__.py").write_text("")
    (tmp_path / "mobius" / "BUILD.bazel").write_text("")
    for name in ("__init__", "capabilities", "contrib_ops"):
        (ep / f"{name}.py").write_text("")
    (ep / "BUILD.bazel").write_text(
        'py_library(name = "init", srcs = ["__init__.py"])\n'
        'py_library(name = "capabilities", srcs = ["capabilities.py"])\n'
        'py_library(name = "contrib_ops", srcs = ["contrib_ops.py"])\n')
    (ep / "my_npu.py").write_text(
        "import onnx_ir as ir\nfrom mobius.ep import contrib_ops\n"
        "from mobius.ep.capabilities import EpCapabilities\n")
    (tmp_path / "ep" / "my_npu").mkdir(parents=True)
    (tmp_path / "ep" / "my_npu" / "my_npu_fusion_test.py").write_text("")
    return tmp_path


def test_a_new_ep_is_its_file_and_its_fusion_table(tmp_path):
    root = _workspace(tmp_path)
    caps = EpCapabilities(name="my-npu", tasks={"text-generation"})
    text = render(str(root), [caps])
    assert ('EP_DEPS = {\n    "my_npu": [\n        ":contrib_ops",\n'
            '        "//third_party:onnx_ir",\n    ],\n}') in text
    assert 'EP_PRIMARY_DTYPES = {\n    "my-npu": "f32",\n}' in text
    assert 'EP_TASKS = {\n    "my-npu": ["text-generation"],\n}' in text
    assert suite_problems(str(root), [caps], update=False) == [
        "ep/my_npu/BUILD.bazel is missing: run ./bazelw run //tools:eps -- --update"]
    assert suite_problems(str(root), [caps], update=True) == []
    build = (root / "ep" / "my_npu" / "BUILD.bazel").read_text()
    assert build == SUITE_BUILD.format(name="my-npu")


def test_a_missing_table_and_a_left_over_suite_are_named(tmp_path):
    root = _workspace(tmp_path)
    (root / "ep" / "my_npu" / "my_npu_fusion_test.py").unlink()
    (root / "ep" / "gone").mkdir()
    (root / "ep" / "gone" / "BUILD.bazel").write_text(SUITE_BUILD.format(name="gone"))
    problems = suite_problems(str(root), [EpCapabilities(name="my-npu")], update=True)
    assert problems == [
        "ep/my_npu/my_npu_fusion_test.py is missing: the my-npu EP's fusion table "
        "(docs/adding_an_ep.md)",
        "ep/gone/ is the suite of no EP (mobius/ep/gone.py is gone): remove the folder"]
