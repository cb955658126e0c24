"""Writes what Bazel needs to know of the EP files of mobius/ep, derived from them.

A built-in EP is mobius/ep/<module>.py (its EpCapabilities) plus its fusion table
ep/<module>/<module>_fusion_test.py; the registry discovers the module. Bazel cannot import
Python, so this tool writes
  rules/eps.bzl             each EP module's py_library deps (read from its imports), each
                            EP's deployment dtype and the tasks it serves
  ep/<module>/BUILD.bazel   where missing: the EP's suites (ep_suite(), rules/ep_suite.bzl);
                            an EP with targets of its own (real-backend, GPU) writes it by hand

    ./bazelw run //tools:eps -- --update     # after adding, editing or removing an EP file
    python -m tools.eps --update             # the same, without Bazel

//tools:eps_test fails while the committed files differ from what this writes.
"""

from __future__ import annotations

import json
import os
import sys

from tools.build_graph import BuildGraph
from tools.generated_bzl import import_deps, write_or_check

PATH = os.path.join("rules", "eps.bzl")
#: deps ep_capabilities() adds to every EP library
_IMPLIED = {":capabilities", ":init"}

_HEADER = '''"""Generated from the EP files of mobius/ep by //tools:eps: do not edit.

    ./bazelw run //tools:eps -- --update

EP_DEPS: each EP module -> its py_library deps, from its imports (ep_capabilities adds
:capabilities and :init). EP_PRIMARY_DTYPES / EP_TASKS: each built-in EP's deployment dtype
(the zoo's packages) and the tasks it serves (None: every task), from its EpCapabilities.
"""
'''

#: ep/<module>/BUILD.bazel of an EP with no targets of its own
SUITE_BUILD = '''load("//rules:defs.bzl", "package_files")
load("//rules:ep_suite.bzl", "ep_suite")

# The {name} EP's suites (fusion, parity, golden): rules/ep_suite.bzl. Written by
# //tools:eps; an EP with targets of its own writes this file by hand.
ep_suite()

package_files()
'''


def ep_deps(root: str, module: str, modules: set[str], graph: BuildGraph) -> list[str]:
    """The deps of //mobius/ep:<module>: the owner of each first-party module it imports and
    //third_party:<name> for each third-party package with such a target."""
    return import_deps(root, os.path.join("mobius", "ep", module + ".py"), "mobius/ep",
                       modules, graph, _IMPLIED)


def render(root: str, eps: list) -> str:
    """rules/eps.bzl for ``eps`` (EpCapabilities of the modules named after them)."""
    from mobius.weights.dtypes import SHORT_NAMES

    modules = [module_name(caps.name) for caps in eps]
    graph = BuildGraph(root)
    lines = [_HEADER, "EP_DEPS = {"]
    for module in modules:
        deps = ep_deps(root, module, set(modules), graph)
        lines += [f'    "{module}": [', *(f'        "{d}",' for d in deps), "    ],"] if deps \
            else [f'    "{module}": [],']
    lines += ["}", "", "EP_PRIMARY_DTYPES = {"]
    lines += [f'    "{caps.name}": "{SHORT_NAMES[caps.primary_dtype]}",' for caps in eps]
    lines += ["}", "", "EP_TASKS = {"]
    lines += [f'    "{caps.name}": {json.dumps(sorted(caps.tasks)) if caps.tasks else None},'
              for caps in eps]
    lines += ["}", ""]
    return "\n".join(lines)


def module_name(ep: str) -> str:
    """mobius/ep/<module>.py and ep/<module>/ of an EP ("trt-rtx" -> trt_rtx)."""
    return ep.replace("-", "_")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def suite_problems(root: str, eps: list, update: bool) -> list[str]:
    """What is missing or left over under ep/ for ``eps``; with ``update``, a missing
    ep/<module>/BUILD.bazel is written first."""
    problems = []
    names = {module_name(caps.name): caps.name for caps in eps}
    for module, name in names.items():
        folder = os.path.join(root, "ep", module)
        table = os.path.join(folder, f"{module}_fusion_test.py")
        if not os.path.exists(table):
            problems.append(f"ep/{module}/{module}_fusion_test.py is missing: the {name} EP's "
                            "fusion table (docs/adding_an_ep.md)")
        build = os.path.join(folder, "BUILD.bazel")
        if not os.path.exists(build) and update:
            os.makedirs(folder, exist_ok=True)
            with open(build, "w") as f:
                f.write(SUITE_BUILD.format(name=name))
            print(f"wrote {build}")
        if not os.path.exists(build):
            problems.append(f"ep/{module}/BUILD.bazel is missing: run ./bazelw run //tools:eps "
                            "-- --update")
        elif "ep_suite()" not in _read(build):
            problems.append(f"ep/{module}/BUILD.bazel does not call ep_suite()")
    for entry in sorted(os.listdir(os.path.join(root, "ep"))):
        build = os.path.join(root, "ep", entry, "BUILD.bazel")
        if entry not in names and os.path.exists(build) and "ep_suite()" in _read(build):
            problems.append(f"ep/{entry}/ is the suite of no EP (mobius/ep/{entry}.py is gone): "
                            "remove the folder")
    return problems


def main(argv: list[str]) -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    # Under `bazel run` the runfiles hold only the EP files rules/eps.bzl already lists: the
    # registry must read the workspace's, or a new EP goes unseen.
    sys.path.insert(0, root)
    from mobius.ep.registry import ep_modules

    eps = [module.CAPABILITIES for module in ep_modules()]
    status = write_or_check(root, PATH, render(root, eps), "//tools:eps", argv)
    problems = suite_problems(root, eps, "--update" in argv)
    for problem in problems:
        print(problem)
    return 1 if problems else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
