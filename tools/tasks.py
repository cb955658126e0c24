"""Writes rules/tasks.bzl: each task module's Bazel library, derived from the task files.

A task is mobius/tasks/<module>.py defining ``TASK = Task(...)``; the registry discovers it.
Bazel cannot import Python, so this tool writes each task module's py_library deps, read
from its imports (its helpers keep their hand-written targets in mobius/tasks/BUILD.bazel).

    ./bazelw run //tools:tasks -- --update     # after adding, editing or removing a task file
    python -m tools.tasks --update             # the same, without Bazel

//tools:tasks_test fails while the committed file differs from what this writes.
"""

from __future__ import annotations

import os
import sys

from tools.build_graph import BuildGraph
from tools.generated_bzl import import_deps, write_or_check

PATH = os.path.join("rules", "tasks.bzl")
#: deps every task library gets (mobius/tasks/BUILD.bazel)
_IMPLIED = {":init"}

_HEADER = '''"""Generated from the task files of mobius/tasks by //tools:tasks: do not edit.

    ./bazelw run //tools:tasks -- --update

TASK_DEPS: each module defining a TASK -> its py_library deps, from its imports (:init added).
"""
'''


def task_deps(root: str, module: str, modules: set[str], graph: BuildGraph) -> list[str]:
    """The deps of //mobius/tasks:<module>: the owner of each first-party module it imports
    and //third_party:<name> for each third-party package with such a target."""
    return import_deps(root, os.path.join("mobius", "tasks", module + ".py"), "mobius/tasks",
                       modules, graph, _IMPLIED)


def render(root: str, modules: list[str]) -> str:
    graph = BuildGraph(root)
    lines = [_HEADER, "TASK_DEPS = {"]
    for module in modules:
        deps = task_deps(root, module, set(modules), graph)
        lines += [f'    "{module}": [', *(f'        "{d}",' for d in deps), "    ],"]
    lines += ["}", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    # Under `bazel run` the runfiles hold only the task files rules/tasks.bzl already lists:
    # the registry must read the workspace's, or a new task goes unseen.
    sys.path.insert(0, root)
    from mobius.tasks.registry import task_modules

    modules = [m.__name__.rsplit(".", 1)[-1] for m in task_modules()]
    return write_or_check(root, PATH, render(root, modules), "//tools:tasks", argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
