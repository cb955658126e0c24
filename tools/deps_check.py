"""The build graph matches the code, both ways: `bazel query rdeps` (and //tools:affected) is
only right when it does.

Missing: for each Python file owned by a target, each import of a workspace module (mobius.*,
testing.*, tools.*, ep.*) must resolve to a file of the tree (under Bazel, the runfiles that
//:source_tree gives the test) and of the same target or one of its direct deps. Imports
under ``if TYPE_CHECKING:`` are exempt (never run). Every Python file must be in some
target's srcs. Unused: each dep of a Python target must own a module its srcs import (a
package's __init__.py counts for every import below it; //third_party:<name> the package
<name>), unless UNUSED_ALLOWED says why not. Bundled tests: each runs in its package's
test_bundle() (:func:`unrun_tests`). Every package's files are in //:source_tree
(:func:`packages_outside_the_tree`).

    python3 -m tools.deps_check      # prints one line per missing or unused dep
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import os
import sys

from tools.build_graph import PACKAGE_FILES, BuildGraph

FIRST_PARTY = ("mobius", "testing", "tools", "ep")
#: every package's files (BUILD.bazel), the data of the tests that read the source tree
SOURCE_TREE = "//:source_tree"
#: import name -> //third_party target name, where the two differ
_DISTRIBUTIONS = {"PIL": "pillow", "optimum": "optimum_onnx"}
_PYTHON = ("py_library", "py_binary", "py_test")


def imported_modules(root: str, path: str, type_checking: bool = False) -> list[tuple[int, str]]:
    """(line, dotted name) of each first-party module ``path`` imports: `from a import b` is
    a.b when that is a module, else a. Those under ``if TYPE_CHECKING:`` only if asked."""
    found = []
    for node in _imports(path, type_checking):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif node.module and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((node.lineno, sub if module_file(root, sub) else node.module))
    return found


def third_party(path: str) -> set[str]:
    """Top-level names of the non-relative imports of ``path`` (as //third_party names them)."""
    names = set()
    for node in _imports(path, type_checking=True):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif node.module and not node.level:
            names.add(node.module.split(".")[0])
    return {_DISTRIBUTIONS.get(name, name) for name in names}


#: the fields through which statements hold statements (an import is a statement, and no
#: expression holds one): the walk skips expressions
_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


@functools.lru_cache(maxsize=None)
def _imports(path: str, type_checking: bool) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The import statements of ``path`` in source order; those in the body of an
    ``if TYPE_CHECKING:`` only if ``type_checking``."""
    found, todo = [], list(_parsed(path).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        for field in _BLOCKS:
            if field == "body" and not type_checking and _is_type_checking(node):
                continue
            todo += getattr(node, field, None) or ()
    return tuple(sorted(found, key=lambda n: (n.lineno, n.col_offset)))


@functools.lru_cache(maxsize=None)
def _parsed(path: str) -> ast.Module:
    """Each file parsed once a process: both checks walk every file's imports."""
    with open(path) as f:
        return ast.parse(f.read(), path)


def _is_type_checking(node) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


#: "target" (each of its deps) or "target -> dep" (fnmatch patterns) the unused check spares: why
UNUSED_ALLOWED = {
    "//mobius/*:registry": "imports each module of its package by name (discovery)",
    "//testing:write_references": "a worker running the cases modules: its deps are theirs",
    "//mobius:mobius": "mobius/__init__.py loads the public API lazily (PEP 562)",
    "//docs:adding_a*_test": "copies the source tree from its runfiles and runs it there",
    "* -> //mobius:main": "runs `python -m mobius` in a subprocess",
    "* -> //*:*_cases": "a test's references (mobius_py_test): it reads their outputs",
    "//mobius/quantize:prequantized_peer_cases -> //third_party:onnxruntime_genai":
        "runs onnxruntime_genai.models.builder with runpy",
    "//mobius:no_torch_test": "its imports are a script's, run in a subprocess",
    "//testing:fork_server": "its imports are a script's, run in a subprocess",
    "//testing:real_backend -> //testing:ep_worker": "runs it in a subprocess",
    "//testing:optimum_test -> //testing:optimum_client": "runs it in a subprocess",
    "//testing:tiny_generate_test -> //testing:tiny_generate": "runs it in a subprocess",
    "//tools:rewrite_rules_test -> //mobius/rewrite:*": "runs tools.rewrite_rules in a subprocess",
    "//testing/js:browser_webgpu_test -> //testing/js:node": "runs node in a subprocess",
    "//testing:optimum_client -> //third_party:optimum_onnx_release":
        "installed in a site of its own ($MOBIUS_OPTIMUM_SITE), run in a subprocess",
    "//testing:*_backend -> //third_party:onnxruntime_*": "the EP's build, imported as onnxruntime",
    "//testing:real_weights -> //third_party:*": "pip-installed weights, read as files",
    "//docs:examples_test -> //third_party:*": "runs the example scripts (data) that import them",
    "//docs:clients_test -> //third_party:*": "runs the client commands in subprocesses",
    "//mobius/trial:verify_test -> //third_party:*": "mobius verify imports them when it runs",
    "//tools:prefill_bench": "imports tools/bench/ as `bench` (its sys.path), which needs them",
}


def module_file(root: str, dotted: str) -> str | None:
    """Workspace-relative file of module ``dotted`` (a module, or a package's __init__.py)."""
    if dotted.split(".")[0] not in FIRST_PARTY:
        return None
    base = os.path.join(*dotted.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def unowned_files(root: str, graph: BuildGraph) -> list[str]:
    """Python files of the workspace's packages that no target lists in srcs."""
    owned = {src for t in graph.targets.values() for src in t.srcs}
    packages = set(graph.packages)
    found = []
    for package in sorted(packages):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, package)):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = [d for d in dirnames
                           if os.path.relpath(os.path.join(dirpath, d), root) not in packages
                           and not d.startswith((".", "bazel-", "__pycache__"))]
            for name in filenames:
                path = os.path.normpath(os.path.join(rel_dir, name))
                if name.endswith(".py") and file_label(path, packages) not in owned:
                    found.append(f"{path}: in no Bazel target's srcs")
    return found


def file_label(path: str, packages: set[str]) -> str:
    directory = os.path.dirname(path)
    while directory not in packages and directory:
        directory = os.path.dirname(directory)
    return f"//{directory}:{os.path.relpath(path, directory or '.')}"


def missing_deps(root: str, graph: BuildGraph | None = None) -> list[str]:
    """One line per import whose module has no owner among the importer's target and deps."""
    graph = graph or BuildGraph(root)
    packages = set(graph.packages)
    owners: dict[str, list[str]] = {}
    for target in graph.targets.values():
        for src in target.srcs:
            owners.setdefault(src, []).append(target.label)
    problems = []
    for target in sorted(graph.targets.values(), key=lambda t: t.label):
        reachable = {target.label, *target.deps}
        for src in target.srcs:
            if not src.endswith(".py") or src == "//testing:run_pytest.py":
                continue
            path = src[2:].replace(":", "/").lstrip("/")
            for line, dotted in imported_modules(root, os.path.join(root, path)):
                module = module_file(root, dotted)
                if module is None and dotted.split(".")[0] in FIRST_PARTY:
                    problems.append(f"{path}:{line}: {target.label} imports {dotted}, a module "
                                    f"of no file in the tree ({SOURCE_TREE})")
                if module is None or module == path:
                    continue
                need = owners.get(file_label(module, packages), [])
                if need and not reachable & set(need):
                    problems.append(f"{path}:{line}: {target.label} imports {dotted} "
                                    f"but does not depend on {' or '.join(need)}")
    return unowned_files(root, graph) + sorted(set(problems))


def unused_deps(root: str, graph: BuildGraph | None = None) -> list[str]:
    """One line per dep of a Python target that owns no module its srcs import."""
    graph = graph or BuildGraph(root)
    packages = set(graph.packages)
    owners: dict[str, set[str]] = {}
    for target in graph.targets.values():
        for src in target.srcs:
            owners.setdefault(src, set()).add(target.label)
    problems = []
    for target in sorted(graph.targets.values(), key=lambda t: t.label):
        if target.kind not in _PYTHON or _allowed(target.label) or "test_bundle" in target.tags:
            continue  # a bundle's deps are its members', checked as theirs
        used = _imported_owners(root, target, owners, packages)
        for dep in target.py_deps:
            if dep not in used and _is_python(graph, dep) and not _allowed(
                    f"{target.label} -> {dep}"):
                problems.append(f"{target.label} depends on {dep} but imports none of its modules")
    return problems


def unrun_tests(graph: BuildGraph) -> list[str]:
    """One line per bundled test (rules/defs.bzl: tagged "manual", left to its package's
    test_bundle()) whose files no bundle of its package runs: `bazel test //...` would
    skip it without a word."""
    bundles: dict[str, set[str]] = {}
    for target in graph.targets.values():
        if "test_bundle" in target.tags:
            bundles.setdefault(target.label.split(":")[0], set()).update(target.srcs)
    problems = []
    for target in sorted(graph.targets.values(), key=lambda t: t.label):
        package = target.label.split(":")[0]
        if "bundled" in target.tags and not set(target.srcs) <= bundles.get(package, set()):
            problems.append(f"{target.label} is bundled but no test_bundle() of {package} runs it")
    return problems


def packages_outside_the_tree(graph: BuildGraph) -> list[str]:
    """One line per package whose files //:source_tree leaves out: the tests that read the
    source tree in their runfiles would not see them, nor rerun when one changes."""
    tree = graph.targets.get(SOURCE_TREE)
    listed = set(tree.srcs) if tree else set()
    problems = []
    for package in graph.packages:
        label = f"//{package}:{PACKAGE_FILES}"
        if label not in graph.targets:
            problems.append(f"//{package} calls no package_files() (//rules:defs.bzl), so "
                            f"{SOURCE_TREE} cannot list its files")
        elif label not in listed:
            problems.append(f"{label} is not in {SOURCE_TREE} (BUILD.bazel): the tests that "
                            "read the source tree miss its files")
    return problems


def _allowed(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in UNUSED_ALLOWED)


def _imported_owners(root: str, target, owners: dict[str, set[str]], packages) -> set[str]:
    """The targets owning a module ``target``'s srcs import, their packages' and their own."""
    used = set()
    for src in target.srcs:
        if not src.endswith(".py"):
            continue
        relpath = src[2:].replace(":", "/").lstrip("/")
        path = os.path.join(root, relpath)
        own = os.path.dirname(relpath).replace("/", ".")
        for dotted in [own] * bool(own) + [d for _, d in imported_modules(root, path, True)]:
            parts = dotted.split(".")
            for end in range(1, len(parts) + 1):
                module = module_file(root, ".".join(parts[:end]))
                if module:
                    used |= owners.get(file_label(module, packages), set())
        used |= {f"//third_party:{name}" for name in third_party(path)}
    return used


def _is_python(graph: BuildGraph, label: str) -> bool:
    """A library an import can use: Python srcs, or a pip package's //third_party marker."""
    target = graph.targets.get(label)
    if target is None:
        return False
    return any(s.endswith(".py") for s in target.srcs) or any(
        t.startswith("pip:") for t in target.tags)


if __name__ == "__main__":
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    graph = BuildGraph(root)
    lines = (missing_deps(root, graph) + unused_deps(root, graph) + unrun_tests(graph)
             + packages_outside_the_tree(graph))
    print("\n".join(lines) or "deps_check: every import has its Bazel dep, every dep an import, "
          f"every bundled test its bundle, every package its place in {SOURCE_TREE}")
    sys.exit(1 if lines else 0)
