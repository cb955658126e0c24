"""What the generators of rules/*.bzl share: a module's Bazel deps read from its imports, and
the check-or-update of the committed file (//tools:families, //tools:rewrite_rules)."""

from __future__ import annotations

import functools
import os

from tools.build_graph import BuildGraph
from tools.deps_check import file_label, imported_modules, module_file, third_party


@functools.lru_cache(maxsize=1)
def _owners(graph: BuildGraph) -> dict[str, str]:
    """File label -> the target that owns it; of a package's __init__.py the target named after
    the package (its public API, e.g. //mobius for `import mobius`) over :init. Once a graph:
    a generator asks for each of its modules."""
    owners: dict[str, str] = {}
    for target in graph.targets.values():
        for src in target.srcs:
            package = target.label[2:].split(":")[0]
            public = target.label.endswith(":" + os.path.basename(package))
            if src not in owners or (public and src.endswith(("/__init__.py", ":__init__.py"))):
                owners[src] = target.label
    return owners


def _short(label: str) -> str:
    """//a/b:b -> //a/b, as BUILD files write it."""
    package, _, name = label.partition(":")
    return package if package.rsplit("/", 1)[-1] == name else label


def import_deps(root: str, path: str, package: str, generated: set[str], graph: BuildGraph,
                implied: set[str] = frozenset()) -> list[str]:
    """The deps of the module at ``path`` (workspace-relative) in ``package``: the owner of
    each first-party module it imports (":<name>" for a module of ``package`` that ``generated``
    names: its target comes from the .bzl being written) and //third_party:<name> for each
    third-party package with such a target; less ``implied`` and itself, buildifier-sorted."""
    packages = set(graph.packages)
    owners = _owners(graph)
    full = os.path.join(root, path)
    deps = set()
    for _, dotted in imported_modules(root, full):
        source = module_file(root, dotted)
        if source is None or source == path:
            continue
        name = os.path.splitext(os.path.basename(source))[0]
        if os.path.dirname(source) == package and name in generated:
            deps.add(":" + name)
            continue
        label = owners.get(file_label(source, packages))
        if label is None:
            raise ValueError(f"{full}: {dotted} is in no Bazel target")
        deps.add(_short(label).replace(f"//{package}:", ":", 1))
    deps |= {f"//third_party:{n}" for n in third_party(full)
             if f"//third_party:{n}" in graph.targets}
    module = os.path.splitext(os.path.basename(path))[0]
    deps -= set(implied) | {":" + module}
    return sorted(d for d in deps if d.startswith(":")) + sorted(
        d for d in deps if not d.startswith(":"))


def write_or_check(root: str, relpath: str, text: str, command: str, argv: list[str]) -> int:
    """0 when ``relpath`` holds ``text`` (or ``--update`` in argv wrote it), else 1."""
    path = os.path.join(root, relpath)
    current = ""
    if os.path.exists(path):
        with open(path) as f:
            current = f.read()
    if current == text:
        print(f"{relpath} is current")
        return 0
    if "--update" not in argv:
        print(f"{relpath} is stale: run ./bazelw run {command} -- --update")
        return 1
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0
