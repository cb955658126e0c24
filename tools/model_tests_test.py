"""rules/model_tests.bzl is what //tools:model_tests writes from the tests of mobius/models,
and a test's deps are the owners of its imports, a cases module's less what the worker has."""

from __future__ import annotations

import os
import subprocess
import sys

from tools.build_graph import BuildGraph
from tools.model_tests import module_deps

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_model_tests_bzl_is_current():
    """Run on the whole tree (//:source_tree), so a new test file makes this fail until the
    file is updated."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("BUILD_WORKSPACE_DIRECTORY", None)
    run = subprocess.run([sys.executable, "-m", "tools.model_tests"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_deps_are_the_owners_of_the_imports(tmp_path):
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "third_party").mkdir()
    (tmp_path / "third_party" / "BUILD.bazel").write_text(
        'py_library(name = "numpy")\npy_library(name = "pillow")\npy_library(name = "pytest")\n'
        'py_library(name = "torch")\n')
    (tmp_path / "testing").mkdir()
    (tmp_path / "testing" / "runs.py").write_text("")
    (tmp_path / "testing" / "BUILD.bazel").write_text(
        'py_library(name = "runs", srcs = ["runs.py"])\n'
        'py_binary(name = "write_references", deps = ["//third_party:torch"])\n')
    models = tmp_path / "mobius" / "models"
    models.mkdir(parents=True)
    (models / "BUILD.bazel").write_text("")
    (models / "llama.py").write_text("")
    (models / "x_cases.py").write_text(
        "import numpy\nfrom testing import runs\n\ndef write_case(case, folder):\n"
        "    import torch\n    from PIL import Image\n")
    (models / "x_test.py").write_text(
        "import pytest\nfrom mobius.models import llama, x_cases\nfrom testing.runs import f\n")
    local = {"llama", "x_cases", "x_test"}
    graph = BuildGraph(str(tmp_path))
    assert module_deps(str(tmp_path), "x_test", local, graph) == [
        ":llama", ":x_cases", "//testing:runs"]
    assert module_deps(str(tmp_path), "x_cases", local, graph) == [
        "//testing:runs", "//third_party:numpy", "//third_party:pillow"]
