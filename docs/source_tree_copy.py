"""What the docs' "adding a ..." tests share: the doc's code template, a copy of the source
tree to drop it into, and a Python subprocess run inside that copy (the copy first on
PYTHONPATH, its own mobius cache), so a doc's steps are followed with nothing else edited."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def template(doc: str, marker: str) -> str:
    """The python block after ``<!-- marker -->`` in docs/``doc``."""
    with open(os.path.join(ROOT, "docs", doc)) as f:
        text = f.read()
    assert f"<!-- {marker} -->" in text, f"docs/{doc} lost its {marker}"
    block = text.split(f"<!-- {marker} -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


def copy_tree(root: pathlib.Path, names: tuple[str, ...], *skipped: str) -> pathlib.Path:
    """Copies the source tree's top-level ``names`` into ``root``, file contents (the
    runfiles' are links), leaving out folders named in ``skipped``."""
    for path in _source_files():
        parts = path.split("/")
        if parts[0] in names and not set(parts[:-1]) & set(skipped):
            os.makedirs(root / os.path.dirname(path), exist_ok=True)
            shutil.copy(os.path.join(ROOT, path), root / path)
    return root


def _source_files() -> list[str]:
    """Every file of the tree: under Bazel the list //:source_tree writes (the runfiles also
    hold built files), else the checkout's files but caches and Bazel's links."""
    manifest = os.path.join(ROOT, "source_tree.txt")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return f.read().splitlines()
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git") and
                   not d.startswith("bazel-")]
        found += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files]
    return found


def run(tree: pathlib.Path, *args: str, unset: tuple[str, ...] = (),
        **env_extra: str) -> subprocess.CompletedProcess:
    """``python args`` in ``tree`` with its environment minus Bazel's workspace and ``unset``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("BUILD_WORKSPACE_DIRECTORY", *unset)}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    env["MOBIUS_CACHE"] = str(tree / "cache")  # into the copy
    env.update(env_extra)
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                          text=True)
