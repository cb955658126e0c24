"""What the docs' "adding a ..." tests share: the doc's code template, a copy of the source
tree to drop it into, and a Python subprocess run inside that copy (the copy first on
PYTHONPATH, its own mobius cache), so a doc's steps are followed with nothing else edited."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the source tree


def template(doc: str, marker: str) -> str:
    """The python block after ``<!-- marker -->`` in docs/``doc``."""
    with open(os.path.join(ROOT, "docs", doc)) as f:
        text = f.read()
    assert f"<!-- {marker} -->" in text, f"docs/{doc} lost its {marker}"
    block = text.split(f"<!-- {marker} -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


def copy_tree(root: pathlib.Path, names: tuple[str, ...], *skipped: str) -> pathlib.Path:
    """Copies the source tree's top-level ``names`` into ``root`` (no caches, no bazel-*
    links, nor folders named in ``skipped``)."""
    ignore = shutil.ignore_patterns("__pycache__", "bazel-*", *skipped)
    for name in names:
        source = os.path.join(ROOT, name)
        if os.path.isdir(source):
            shutil.copytree(source, root / name, ignore=ignore)
        else:
            shutil.copy(source, root / name)
    return root


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
