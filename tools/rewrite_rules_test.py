"""rules/rewrite_rules.bzl is what //tools:rewrite_rules writes from the rule and test files,
and a new rule's entries come from its file and its test alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tools.rewrite_rules import declared_attrs, render

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_rewrite_rules_bzl_is_current():
    """Run on the whole tree (//:source_tree, not only the rule files the deps' libraries
    list), so a new rule or test file makes this fail until the file is updated."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("BUILD_WORKSPACE_DIRECTORY", None)
    run = subprocess.run([sys.executable, "-m", "tools.rewrite_rules"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def _workspace(tmp_path):
    """A workspace with mobius/rewrite's hand-written targets and one new rule + its test."""
    (tmp_path / "BUILD.bazel").write_text("")
    (tmp_path / "third_party").mkdir()
    (tmp_path / "third_party" / "BUILD.bazel").write_text(
        'py_library(name = "numpy")\npy_library(name = "pytest")\n')
    rewrite = tmp_path / "mobius" / "rewrite"
    rewrite.mkdir(parents=True)
    (tmp_path / "mobius" / "__init__.py").write_text("")
    (tmp_path / "mobius" / "BUILD.bazel").write_text(
        'py_library(name = "init", srcs = ["__init__.py"])\n'
        'py_library(name = "mobius", srcs = ["__init__.py"])\n')
    for name in ("__init__", "rule", "fusion_util"):
        (rewrite / f"{name}.py").write_text("")
    (rewrite / "BUILD.bazel").write_text(
        'py_library(name = "init", srcs = ["__init__.py"])\n'
        'py_library(name = "rule", srcs = ["rule.py"])\n'
        'py_library(name = "fusion_util", srcs = ["fusion_util.py"])\n')
    (rewrite / "new_rule.py").write_text(
        "import numpy as np\nfrom mobius.rewrite import fusion_util\n"
        "from mobius.rewrite.rule import Rule\n")
    (rewrite / "new_rule_test.py").write_text(
        "import mobius\nimport pytest\nfrom mobius.rewrite.new_rule import NewRule\n\n"
        '#: this test\'s Bazel target\nTEST_TARGET = {"size": "medium", "tiny": ["tiny-llama"]}\n')
    return rewrite


def test_a_new_rule_is_its_file_and_its_test(tmp_path):
    _workspace(tmp_path)
    text = render(str(tmp_path), ["new_rule"])
    assert 'REWRITE_RULE_DEPS = {\n    "new_rule": [\n        ":fusion_util",\n' \
           '        "//third_party:numpy",\n    ],\n}' in text
    assert ('    "new_rule_test": {\n        "deps": [\n            ":new_rule",\n'
            '            "//mobius",\n            "//third_party:pytest",\n        ],\n'
            '        "size": "medium",\n        "tiny": [\n            "tiny-llama",\n'
            '        ],\n    },') in text


def test_test_target_rejects_what_mobius_py_test_does_not_take(tmp_path):
    rewrite = _workspace(tmp_path)
    (rewrite / "new_rule_test.py").write_text('TEST_TARGET = {"deps": ["//x"]}\n')
    with pytest.raises(ValueError, match="TEST_TARGET sets"):
        declared_attrs(str(rewrite / "new_rule_test.py"))
