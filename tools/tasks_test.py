"""rules/tasks.bzl is what //tools:tasks writes from the task files, and a new task's entry
comes from its file alone."""

from __future__ import annotations

import os
import subprocess
import sys

from tools.build_graph import BuildGraph
from tools.tasks import render, task_deps

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_tasks_bzl_is_current():
    """Run on the whole tree (//:source_tree, not only the task files the deps' libraries
    list), so a new task file makes this fail until the file is updated."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("BUILD_WORKSPACE_DIRECTORY", None)
    run = subprocess.run([sys.executable, "-m", "tools.tasks"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_new_task_is_its_file(tmp_path):
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "third_party").mkdir()
    (tmp_path / "third_party" / "BUILD.bazel").write_text('py_library(name = "onnx_ir")\n')
    tasks = tmp_path / "mobius" / "tasks"
    tasks.mkdir(parents=True)
    (tmp_path / "mobius" / "__init__.py").write_text("")
    (tmp_path / "mobius" / "roles.py").write_text("")
    (tmp_path / "mobius" / "BUILD.bazel").write_text(
        'py_library(name = "roles", srcs = ["roles.py"])\n')
    for name in ("__init__", "task", "encoder"):
        (tasks / f"{name}.py").write_text("")
    (tasks / "BUILD.bazel").write_text(
        'py_library(name = "init", srcs = ["__init__.py"])\n'
        'py_library(name = "task", srcs = ["task.py"])\n')
    (tasks / "new_task.py").write_text(
        "import onnx_ir as ir\nfrom mobius.roles import ENCODER\n"
        "from mobius.tasks import encoder\nfrom mobius.tasks.task import Task\n")
    deps = task_deps(str(tmp_path), "new_task", {"encoder", "new_task"},
                     BuildGraph(str(tmp_path)))
    assert deps == [":encoder", ":task", "//mobius:roles", "//third_party:onnx_ir"]
    text = render(str(tmp_path), ["encoder", "new_task"])
    assert '    "new_task": [\n        ":encoder",\n        ":task",\n' in text
