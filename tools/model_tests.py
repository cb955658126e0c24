"""Writes rules/model_tests.bzl: the deps of each test and reference_cases module of
mobius/models, read from its imports.

mobius/models/BUILD.bazel makes a target of every <x>_test.py and <x>_cases.py from this
file; only what imports cannot say (size, data, tags, ...) is written there, in _TESTS.

    ./bazelw run //tools:model_tests -- --update     # after adding a test or changing imports
    python -m tools.model_tests --update             # the same, without Bazel

//tools:model_tests_test fails while the committed file differs from what this writes.
"""

from __future__ import annotations

import os
import sys

from tools.build_graph import BuildGraph
from tools.generated_bzl import import_deps, write_or_check

PATH = os.path.join("rules", "model_tests.bzl")
PACKAGE = os.path.join("mobius", "models")
#: deps mobius_py_test() adds to every test
_IMPLIED = {"//third_party:pytest"}
#: runs every write_case: its third-party deps are a cases module's without being its deps
WORKER = "//testing:write_references"

_HEADER = '''"""Generated from the tests of mobius/models by //tools:model_tests: do not edit.

    ./bazelw run //tools:model_tests -- --update

MODEL_TEST_DEPS: each <x>_test and <x>_cases module's deps, from its imports (a test's
:<y>_cases deps are its references; mobius_py_test adds //third_party:pytest; a cases
module's third-party packages that //testing:write_references has are left out).
"""
'''


def modules(root: str) -> list[str]:
    """The test and reference_cases modules of mobius/models, sorted."""
    return sorted(name[:-3] for name in os.listdir(os.path.join(root, PACKAGE))
                  if name.endswith(("_test.py", "_cases.py")))


def module_deps(root: str, module: str, local: set[str], graph: BuildGraph) -> list[str]:
    """The deps of mobius/models/<module>.py; ``local``: the package's generated targets
    (family, test and cases modules), named ":<module>" before Bazel knows them. A cases
    module's torch, transformers, ... come with the worker (write_case imports them), so the
    test that imports its CASES does not get them."""
    implied = set(_IMPLIED)
    if module.endswith("_cases"):
        implied |= {d for d in graph.targets[WORKER].deps if d.startswith("//third_party:")}
    return import_deps(root, os.path.join(PACKAGE, module + ".py"), PACKAGE, local, graph,
                       implied)


def render(root: str) -> str:
    graph = BuildGraph(root)
    names = modules(root)
    # every module x.py of the package is its target :x (:init aside), known to Bazel or not yet
    local = {name[:-3] for name in os.listdir(os.path.join(root, PACKAGE))
             if name.endswith(".py") and name != "__init__.py"}
    lines = [_HEADER, "MODEL_TEST_DEPS = {"]
    for module in names:
        deps = module_deps(root, module, local, graph)
        lines += [f'    "{module}": [', *(f'        "{d}",' for d in deps), "    ],"]
    lines += ["}", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    return write_or_check(root, PATH, render(root), "//tools:model_tests", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
