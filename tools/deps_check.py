"""Every first-party import has its Bazel dep: `bazel query rdeps` (and //tools:affected) is only
right when the build graph matches the code.

For each Python file owned by a target, each import of a workspace module (mobius.*, testing.*,
tools.*, ep.*) must resolve to a file of the same target or of one of its direct deps.
Imports under ``if TYPE_CHECKING:`` are exempt (never run). Every Python file must be in
some target's srcs.

    python3 tools/deps_check.py      # prints one line per missing dep
"""

from __future__ import annotations

import ast
import os
import sys

from tools.build_graph import BuildGraph, workspace_packages

FIRST_PARTY = ("mobius", "testing", "tools", "ep")


def imported_modules(root: str, path: str) -> list[tuple[int, str]]:
    """(line, dotted name) of each first-party module ``path`` imports: `from a import b` is
    a.b when that is a module, else a."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    skipped = {id(n) for node in ast.walk(tree) if _is_type_checking(node)
               for child in node.body for n in ast.walk(child)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((node.lineno, sub if module_file(root, sub) else node.module))
    return found


def _is_type_checking(node) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


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
    packages = set(workspace_packages(root))
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
    packages = set(workspace_packages(root))
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
                if module is None or module == path:
                    continue
                need = owners.get(file_label(module, packages), [])
                if need and not reachable & set(need):
                    problems.append(f"{path}:{line}: {target.label} imports {dotted} "
                                    f"but does not depend on {' or '.join(need)}")
    return unowned_files(root, graph) + sorted(set(problems))


if __name__ == "__main__":
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    lines = missing_deps(root)
    print("\n".join(lines) or "deps_check: every first-party import has its Bazel dep")
    sys.exit(1 if lines else 0)
