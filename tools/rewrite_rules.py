"""Writes rules/rewrite_rules.bzl: what Bazel needs to know of the rule files, derived from them.

A rule class declares its pipeline stage and order (mobius/rewrite/rule.py) and the registry
(mobius/rewrite/registry.py) discovers it. Bazel cannot import Python, so this tool writes
each rule module's py_library deps (read from its imports) and each test of mobius/rewrite:
its deps (read from its imports) plus the attributes its file declares in ``TEST_TARGET``
(size, tiny presets, data: the keyword arguments of mobius_py_test).

    ./bazelw run //tools:rewrite_rules -- --update     # after adding or editing a rule or test
    python -m tools.rewrite_rules --update             # the same, without Bazel

//tools:rewrite_rules_test fails while the committed file differs from what this writes.
"""

from __future__ import annotations

import ast
import json
import os
import sys

from tools.build_graph import BuildGraph
from tools.generated_bzl import import_deps, write_or_check

PATH = os.path.join("rules", "rewrite_rules.bzl")
PACKAGE = os.path.join("mobius", "rewrite")
#: deps rewrite_rule() adds to every rule library
_IMPLIED = {":init", ":rule"}
#: what a test file's TEST_TARGET may set (deps and srcs come from the file itself)
_TEST_ATTRS = ("size", "tiny", "data", "shard_count", "tags")

_HEADER = '''"""Generated from the rule and test files of mobius/rewrite by //tools:rewrite_rules: do not edit.

    ./bazelw run //tools:rewrite_rules -- --update

REWRITE_RULE_DEPS: each module declaring a pipeline rule (a Rule class with a stage) -> its
py_library deps, from its imports (rewrite_rule adds :init and :rule). REWRITE_TESTS: each
<name>_test.py of mobius/rewrite -> mobius_py_test's arguments: deps from its imports, the rest
from the file's TEST_TARGET.
"""
'''


def declared_attrs(path: str) -> dict:
    """The module-level ``TEST_TARGET = {...}`` of the test file at ``path`` ({} if none)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "TEST_TARGET"):
            attrs = ast.literal_eval(node.value)
            unknown = set(attrs) - set(_TEST_ATTRS)
            if unknown:
                raise ValueError(f"{path}: TEST_TARGET sets {sorted(unknown)}; "
                                 f"it may set {', '.join(_TEST_ATTRS)}")
            return attrs
    return {}


def _test_modules(root: str) -> list[str]:
    return sorted(name[:-3] for name in os.listdir(os.path.join(root, PACKAGE))
                  if name.endswith("_test.py"))


def render(root: str, modules: list[str] | None = None) -> str:
    """The file's text; ``modules``: the rule modules (default: what the registry finds)."""
    if modules is None:
        from mobius.rewrite.registry import rule_modules

        modules = rule_modules()
    graph = BuildGraph(root)
    lines = [_HEADER, "REWRITE_RULE_DEPS = {"]
    for module in modules:
        deps = import_deps(root, os.path.join(PACKAGE, module + ".py"), PACKAGE, set(modules),
                           graph, _IMPLIED)
        lines += [f'    "{module}": [', *(f'        "{d}",' for d in deps), "    ],"]
    lines += ["}", "", "REWRITE_TESTS = {"]
    for test in _test_modules(root):
        path = os.path.join(PACKAGE, test + ".py")
        attrs = {"deps": import_deps(root, path, PACKAGE, set(modules), graph)}
        attrs.update(sorted(declared_attrs(os.path.join(root, path)).items()))
        lines.append(f'    "{test}": {{')
        for key, value in attrs.items():
            if isinstance(value, list):
                lines += [f'        "{key}": [', *(f"            {json.dumps(v)}," for v in value),
                          "        ],"]
            else:
                lines.append(f'        "{key}": {json.dumps(value)},')
        lines.append("    },")
    lines += ["}", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    # Under `bazel run` the runfiles hold only the rule files the committed .bzl already
    # lists: the registry must read the workspace's, or a new rule goes unseen.
    sys.path.insert(0, root)
    return write_or_check(root, PATH, render(root), "//tools:rewrite_rules", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
