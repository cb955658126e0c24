"""Which tests, model families, EPs and packages a change affects, from the Bazel build graph.

    ./bazelw run //tools:affected -- [--base REF] [--run]

Changed files come from `git diff` against REF (default: the merge base with main) plus
uncommitted changes; `bazel query 'rdeps(//..., set(FILES))'` gives every target that depends
on them. That set is then narrowed by scope tags (set by the macros in //rules:defs.bzl):
a file owned by a `family:X`, `rule:X` or `ep:X` target does not select tests scoped to
*other* families / rules / EPs, though the registries make every test depend on every file.
A test's scope is its own tags plus those of the scoped targets it depends on directly;
EP suites (`ep:X`) run every family through every rule, so family and rule changes keep them.
The tests that read the source tree (data //:source_tree: every file) are unscoped, so any
change selects them, as any change makes Bazel rerun them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

SCOPES = ("family:", "rule:", "ep:")


@dataclasses.dataclass
class Node:
    label: str
    kind: str
    tags: list[str]
    srcs: list[str]
    deps: list[str]


def scope_tags(tags) -> set[str]:
    return {t for t in tags if t.startswith(SCOPES)}


def select(changed: list[str], rdeps_of, nodes: dict[str, Node]) -> dict[str, list[str]]:
    """Groups the targets the changed file labels affect.

    ``rdeps_of(label)``: labels of every target depending on ``label`` (itself included);
    ``nodes``: label -> Node for at least those targets and the tests' direct deps.
    """
    tests, families, eps, packages = set(), set(), set(), set()
    for file in changed:
        users = [nodes[u] for u in rdeps_of(file) if u in nodes]
        own_scope = set().union(set(), *(scope_tags(n.tags) for n in users if file in n.srcs))
        # a scoped file's reach: the libraries of its kind built on it (llama.py -> mistral, ...)
        libs = set().union(set(), *(scope_tags(n.tags) for n in users if n.kind == "py_library"))
        kinds = {t.split(":", 1)[0] for t in own_scope}
        reach = own_scope | {t for t in libs if t.split(":", 1)[0] in kinds}
        # a test_bundle() runs tests that are targets themselves: those are chosen instead
        chosen = [n for n in users if n.kind.endswith("_test") and "test_bundle" not in n.tags
                  and _selected(n, reach, nodes)]
        tests |= {n.label for n in chosen}
        packages |= {n.label for n in users if n.kind == "mobius_package" and _built_by(n, reach)}
        families |= {t[7:] for t in (reach or libs) if t.startswith("family:")}
        reached_eps = {t for t in reach if t.startswith("ep:")}
        eps |= {t[3:] for n in chosen for t in scope_tags(n.tags) if t.startswith("ep:")
                and (not reached_eps or t in reached_eps)}
    return {"tests": sorted(tests), "families": sorted(families), "eps": sorted(eps),
            "packages": sorted(packages)}


def _built_by(package: Node, reach: set[str]) -> bool:
    """A package depends on every rule; on one family's and one EP's files only."""
    tags = scope_tags(package.tags)
    for kind in ("family:", "ep:"):
        scoped = {t for t in reach if t.startswith(kind)}
        if scoped and not scoped & tags:
            return False
    return True


def _selected(test: Node, reach: set[str], nodes: dict[str, Node]) -> bool:
    if not reach:  # a shared file: everything that depends on it
        return True
    scope = scope_tags(test.tags) | {t for d in test.deps if d in nodes
                                     for t in scope_tags(nodes[d].tags)}
    if not scope or scope & reach:
        return True
    suite = any(t.startswith("ep:") for t in scope_tags(test.tags))
    return suite and not any(t.startswith("ep:") for t in reach)


# ---- the real build graph: git + bazel query ---------------------------------------------------


def changed_files(root: str, base: str | None) -> list[str]:
    git = lambda *a: subprocess.run(["git", "-C", root, *a], check=True, text=True,  # noqa: E731
                                    capture_output=True).stdout.split()
    if base is None:
        base = next((git("merge-base", "HEAD", ref)[0] for ref in ("main", "origin/main")
                     if subprocess.run(["git", "-C", root, "rev-parse", "-q", "--verify", ref],
                                       capture_output=True).returncode == 0), "HEAD")
    files = set(git("diff", "--name-only", base)) | set(git("ls-files", "--others",
                                                            "--exclude-standard"))
    return sorted(f for f in files if os.path.exists(os.path.join(root, f)))


def file_labels(root: str, files: list[str]) -> list[str]:
    """Bazel source-file labels (//pkg:rel/path) of the files inside this workspace's packages."""
    labels = []
    for path in files:
        directory = os.path.dirname(path)
        while directory and not os.path.isfile(os.path.join(root, directory, "BUILD.bazel")):
            directory = os.path.dirname(directory)
        if os.path.isfile(os.path.join(root, directory, "BUILD.bazel")):
            labels.append(f"//{directory}:{os.path.relpath(path, directory or '.')}")
    return labels


def bazel_query(root: str, expression: str) -> dict[str, Node]:
    bazel = os.path.join(root, "bazelw")
    out = subprocess.run([bazel, "query", "--keep_going", "--output=xml", expression], cwd=root,
                         capture_output=True, text=True).stdout
    nodes = {}
    for rule in ET.fromstring(out).iter("rule") if out.strip() else ():
        lists = {el.get("name"): [v.get("value") for v in el] for el in rule.findall("list")}
        nodes[rule.get("name")] = Node(rule.get("name"), rule.get("class"), lists.get("tags", []),
                                       lists.get("srcs", []),
                                       lists.get("deps", []) + lists.get("data", []))
    return nodes


def query_select(root: str, labels: list[str]) -> dict[str, list[str]]:
    known = bazel_query(root, "set(%s)" % " ".join(_packages_of(labels)))
    declared = {s for n in known.values() for s in n.srcs} | {
        d for n in known.values() for d in n.deps}
    labels = [label for label in labels if label in declared or _is_build_file(label)]
    users: dict[str, set[str]] = {}
    nodes: dict[str, Node] = {}
    for label in labels:
        target = _package_all(label) if _is_build_file(label) else label
        found = bazel_query(root, f"rdeps(//..., {target})")
        nodes.update(found)
        users[label] = set(found)
    direct = {d for n in nodes.values() for d in n.deps if d not in nodes}
    if direct:
        nodes.update(bazel_query(root, "set(%s)" % " ".join(sorted(direct))))
    return select(labels, lambda label: users[label], nodes)


def _is_build_file(label: str) -> bool:
    return label.endswith((":BUILD.bazel", ".bzl"))


def _package_all(label: str) -> str:
    """A BUILD file: its package's rules; a .bzl file: every rule (macros are everywhere)."""
    return "//..." if label.endswith(".bzl") else "//%s:all" % label[2:].split(":")[0]


def _packages_of(labels: list[str]) -> list[str]:
    return sorted({"//%s:all" % label[2:].split(":")[0] for label in labels})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="affected", description=__doc__.split("\n")[0])
    parser.add_argument("--base", help="git ref to diff against (default: merge base with main)")
    parser.add_argument("--run", action="store_true", help="bazel test the affected tests")
    args = parser.parse_args(argv)
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    files = changed_files(root, args.base)
    groups = query_select(root, file_labels(root, files)) if files else {}
    print(f"changed files ({len(files)}):", *files, sep="\n  ")
    for name in ("families", "eps", "packages", "tests"):
        print(f"{name} ({len(groups.get(name, []))}):", *groups.get(name, []), sep="\n  ")
    if args.run and groups.get("tests"):
        return subprocess.run([os.path.join(root, "bazelw"), "test", *groups["tests"]],
                              cwd=root).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
