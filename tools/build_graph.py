"""The workspace's Bazel targets read without Bazel: BUILD files and the .bzl macros they load,
evaluated as Python with stub rules that record each target's kind, srcs, deps, data and tags.

Starlark is (for the subset our BUILD files use) Python syntax, so macros such as
ep_suite() or mobius_py_test() expand exactly as Bazel expands them. Used where Bazel
cannot run: inside a test (tools/deps_test.py, tools/affected_test.py).
"""

from __future__ import annotations

import builtins
import dataclasses
import os
import re


@dataclasses.dataclass
class Target:
    label: str  # //pkg:name
    kind: str  # py_library, py_test (mobius_py_test expands to it), tiny_checkpoint, ...
    srcs: list[str]  # labels
    deps: list[str]  # labels of deps + data
    tags: list[str]
    py_deps: list[str] = dataclasses.field(default_factory=list)  # labels of deps alone
    #: the rule's attributes as the BUILD file gave them (what native.existing_rules() returns)
    attrs: dict = dataclasses.field(default_factory=dict)


#: the target package_files() (//rules:defs.bzl) declares in every package
PACKAGE_FILES = "package_files"


def workspace_packages(root: str) -> list[str]:
    """Package paths ('' for the root) of this workspace, not of nested repositories."""
    packages = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "bazel-"))
                             and not os.path.exists(os.path.join(dirpath, d, "WORKSPACE")))
        if "BUILD.bazel" in filenames or "BUILD" in filenames:
            packages.append(rel)
    return packages


def normalize(label: str, package: str) -> str:
    """'x.py' / ':x' / '//p' / '//p:x' in ``package`` -> '//p:x'."""
    if label.startswith("@"):
        return label
    if label.startswith("//"):
        pkg, _, name = label[2:].partition(":")
        return f"//{pkg}:{name or pkg.rsplit('/', 1)[-1]}"
    return f"//{package}:{label.lstrip(':')}"


class _Package:
    """Evaluation state of one BUILD file: the targets it declares."""

    def __init__(self, graph: "BuildGraph", package: str):
        self.graph = graph
        self.package = package
        self.targets: list[Target] = []

    def glob(self, include, exclude=(), **_):
        """Bazel's glob: this package's files (hidden ones too, none of a subpackage's) that
        match an ``include`` pattern and no ``exclude`` one; a folder that an exclude
        pattern's ``<folder>/**`` names is never walked (the root's links to Bazel's outputs)."""
        base = os.path.join(self.graph.root, self.package)
        included = [_glob_regex(p) for p in include]
        excluded = [_glob_regex(p) for p in exclude]
        pruned = [_glob_regex(p[:-len("/**")]) for p in exclude if p.endswith("/**")]
        found = []
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            prefix = "" if rel == "." else rel + "/"
            dirnames[:] = [d for d in dirnames if not _is_boundary(os.path.join(dirpath, d))
                           and not any(p.fullmatch(prefix + d) for p in pruned)]
            for name in filenames:
                path = prefix + name
                if any(p.fullmatch(path) for p in included) and not any(
                        p.fullmatch(path) for p in excluded):
                    found.append(path)
        return sorted(found)

    def rule(self, kind: str, implicit: tuple[str, ...] = ()):
        """A recorder for targets of ``kind``; ``implicit``: labels every one depends on."""
        def record(name, srcs=(), deps=(), data=(), tags=(), tests=(), **rest):
            labels = lambda xs: [normalize(x, self.package) for x in xs]  # noqa: E731
            attrs = dict(rest, name=name, kind=kind, srcs=list(srcs), deps=list(deps),
                         data=list(data), tags=list(tags))
            if name == PACKAGE_FILES:  # it lists every file, so it owns none: they are its data
                srcs, data = (), [*data, *srcs]
            self.targets.append(Target(normalize(":" + name, self.package), kind, labels(srcs),
                                       labels([*deps, *data, *tests, *implicit]), list(tags),
                                       labels(deps), attrs))
        return record


class _Native:
    def __init__(self, package: _Package):
        self._package = package

    def glob(self, *args, **kwargs):
        return self._package.glob(*args, **kwargs)

    def package_name(self):
        return self._package.package

    def existing_rules(self):
        """Bazel's defaults for the attributes test_bundle() reads, then what was given."""
        defaults = {"args": [], "size": "medium"}
        return {t.attrs["name"]: {**defaults, **t.attrs} for t in self._package.targets}

    def __getattr__(self, kind):
        return self._package.rule(kind)


class BuildGraph:
    """All targets of the workspace at ``root``."""

    def __init__(self, root: str):
        self.root = root
        self._bzl: dict[str, dict] = {}
        self.targets: dict[str, Target] = {}
        #: its package paths (workspace_packages(): a walk of the whole tree, done once)
        self.packages = workspace_packages(root)
        for package in self.packages:
            for target in self._eval_build(package):
                self.targets[target.label] = target

    def _eval_build(self, package: str) -> list[Target]:
        state = _Package(self, package)
        path = os.path.join(self.root, package, "BUILD.bazel")
        env = self._globals(state)
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), env)  # noqa: S102 - our own BUILD files
        return state.targets

    def _globals(self, state: _Package) -> dict:
        env = _AutoRules(state)
        env.update(native=_Native(state), glob=state.glob, fail=_fail, Label=str,
                   select=lambda d: next(iter(d.values())), attr=_AttrStub(),
                   rule=lambda implementation=None, attrs=None, **kw: _RuleStub(attrs or {}),
                   provider=lambda *a, **kw: None, aspect=lambda *a, **kw: None)
        env["load"] = lambda bzl, *names, **aliases: self._load(env, bzl, names, aliases)
        for kind in ("package", "licenses", "exports_files"):
            env[kind] = lambda *a, **kw: None
        return env

    def _load(self, env, bzl: str, names, aliases) -> None:
        if bzl.startswith("@"):  # a generated repository's constants (@python_cache_tag):
            for name in (*names, *aliases):  # they name files, never targets or deps
                env[name] = f"{bzl}%{name}"
            return
        module = self._bzl_module(bzl, env)
        for name in names:
            env[name] = module[name]
        for alias, name in aliases.items():
            env[alias] = module[name]

    def _bzl_module(self, bzl: str, caller_env) -> dict:
        label = normalize(bzl, "")
        pkg, name = label[2:].split(":")
        path = os.path.join(self.root, pkg, name)
        state = caller_env["native"]._package
        env = self._globals(state)
        with open(path) as f:
            exec(compile(f.read(), path, "exec"), env)  # noqa: S102 - our own .bzl files
        for var, value in list(env.items()):
            if isinstance(value, _RuleStub):
                env[var] = state.rule(var, value.implicit)
        return env

    def owners(self, file_label: str) -> list[Target]:
        return [t for t in self.targets.values() if file_label in t.srcs]

    def rdeps(self, labels: set[str]) -> set[str]:
        """Every target that depends, directly or not, on one of ``labels`` (and those)."""
        users: dict[str, set[str]] = {}
        for target in self.targets.values():
            for dep in target.deps + target.srcs:
                users.setdefault(dep, set()).add(target.label)
        seen, todo = set(labels), list(labels)
        while todo:
            for user in users.get(todo.pop(), ()):
                if user not in seen:
                    seen.add(user)
                    todo.append(user)
        return seen


class _AutoRules(dict):
    """Globals of a BUILD file: unknown names are native rules (py_library, filegroup, ...)."""

    def __init__(self, state):
        super().__init__()
        self._state = state

    def __missing__(self, key):
        if key.startswith("__") or hasattr(builtins, key):
            raise KeyError(key)
        return self._state.rule(key)


class _RuleStub:
    """What rule() returns; its private label attributes are implicit deps."""

    def __init__(self, attrs: dict):
        self.implicit = tuple(v for k, v in attrs.items() if k.startswith("_") and isinstance(v, str))


class _AttrStub:
    """attr.label(default = "//x:y") -> "//x:y"; other attributes -> their default."""

    def __getattr__(self, name):
        return lambda *a, **kw: kw.get("default")


def _is_boundary(folder: str) -> bool:
    """A subpackage, or a nested repository: a glob of the package above stops there."""
    return any(os.path.isfile(os.path.join(folder, f)) for f in ("BUILD", "BUILD.bazel",
                                                                 "WORKSPACE"))


def _glob_regex(pattern: str) -> re.Pattern:
    """A glob pattern as Bazel reads it: ``*`` within a path segment, ``**`` any segments."""
    parts = pattern.split("/")
    regex = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            regex += ".+" if last else "(?:[^/]+/)*"
        else:
            regex += "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
                             for c in part) + ("" if last else "/")
    return re.compile(regex)


def _fail(message, *args):
    raise ValueError(f"BUILD evaluation failed: {message}")
