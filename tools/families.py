"""Writes rules/families.bzl: what Bazel needs to know of the family files, derived from them.

A family file (mobius/models/<module>.py) declares its families and tiny presets; the
registry discovers it. Bazel cannot import Python, so this tool writes the facts its
BUILD files need: each family module's py_library deps (read from the module's imports)
which module declares each tiny preset (its family:<module> scope tag) and its task.

    ./bazelw run //tools:families -- --update     # after adding or editing a family file
    python -m tools.families --update             # the same, without Bazel

//tools:families_test fails while the committed file differs from what this writes.
"""

from __future__ import annotations

import os
import sys

from tools.build_graph import BuildGraph
from tools.generated_bzl import import_deps, write_or_check

PATH = os.path.join("rules", "families.bzl")
#: deps mobius_model() adds to every family library
_IMPLIED = {":family", ":init"}

_HEADER = '''"""Generated from the family files of mobius/models by //tools:families: do not edit.

    ./bazelw run //tools:families -- --update

FAMILY_DEPS: each family module's py_library deps, from its imports (mobius_model adds
:family and :init). TINY_PRESET_FAMILIES: each tiny preset -> the module that declares it
(the family:<module> scope tag of its packages, //tools:affected). TINY_PRESET_TASKS:
each tiny preset -> its family's task (the zoo leaves out EPs that do not serve it).
"""
'''


def family_deps(root: str, module: str, families: set[str], graph: BuildGraph) -> list[str]:
    """The deps of //mobius/models:<module>: the owner of each first-party module it imports
    (a family module's own target for another family) and //third_party:<name> for each
    third-party package with such a target."""
    return import_deps(root, os.path.join("mobius", "models", module + ".py"), "mobius/models",
                       families, graph, _IMPLIED)


def render(root: str) -> str:
    from mobius.models.registry import FAMILY_MODULES, family_for
    from mobius.tiny.presets import PRESET_MODULES, TINY_PRESETS

    families = [m.__name__.rsplit(".", 1)[-1] for m in FAMILY_MODULES]
    graph = BuildGraph(root)
    lines = [_HEADER, "FAMILY_DEPS = {"]
    for module in families:
        deps = family_deps(root, module, set(families), graph)
        lines += [f'    "{module}": [', *(f'        "{d}",' for d in deps), "    ],"]
    lines += ["}", "", "TINY_PRESET_FAMILIES = {"]
    lines += [f'    "{preset}": "{PRESET_MODULES[preset]}",' for preset in sorted(PRESET_MODULES)]
    lines += ["}", "", "TINY_PRESET_TASKS = {"]
    lines += [f'    "{preset}": "{family_for(TINY_PRESETS[preset]).task.name}",'
              for preset in sorted(TINY_PRESETS)]
    lines += ["}", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    # Under `bazel run` the runfiles hold only the family files rules/families.bzl already
    # lists: the registry must read the workspace's, or a new family goes unseen.
    sys.path.insert(0, root)
    return write_or_check(root, PATH, render(root), "//tools:families", argv)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
