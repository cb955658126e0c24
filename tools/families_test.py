"""rules/families.bzl is what //tools:families writes from the family files, and the deps it
derives are the imports' owners."""

from __future__ import annotations

import os
import subprocess
import sys

from tools.build_graph import BuildGraph
from tools.families import family_deps

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_families_bzl_is_current():
    """Run on the whole tree (//:source_tree, not only the family files the deps' libraries
    list), so a new family file makes this fail until the file is updated."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("BUILD_WORKSPACE_DIRECTORY", None)
    run = subprocess.run([sys.executable, "-m", "tools.families"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_deps_are_the_owners_of_the_imports(tmp_path):
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "third_party").mkdir()
    (tmp_path / "third_party" / "BUILD.bazel").write_text('py_library(name = "numpy")\n')
    models = tmp_path / "mobius" / "models"
    models.mkdir(parents=True)
    (tmp_path / "mobius" / "__init__.py").write_text("")
    (tmp_path / "mobius" / "errors.py").write_text("")
    (tmp_path / "mobius" / "BUILD.bazel").write_text(
        'py_library(name = "errors", srcs = ["errors.py"])\n')
    for name in ("__init__", "family", "helper", "llama"):
        (models / f"{name}.py").write_text("")
    (models / "clone.py").write_text(
        "import dataclasses\nimport numpy as np\nfrom mobius.errors import MobiusError\n"
        "from mobius.models import llama\nfrom mobius.models.family import ModelFamily\n"
        "from mobius.models.helper import f\n")
    (models / "BUILD.bazel").write_text(
        'py_library(name = "init", srcs = ["__init__.py"])\n'
        'py_library(name = "family", srcs = ["family.py"])\n'
        'py_library(name = "helper", srcs = ["helper.py"])\n')
    deps = family_deps(str(tmp_path), "clone", {"clone", "llama"}, BuildGraph(str(tmp_path)))
    assert deps == [":helper", ":llama", "//mobius:errors", "//third_party:numpy"]
