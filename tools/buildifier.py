"""Formats every BUILD / .bzl file of the source tree with buildifier (sorted deps, one
attribute order), so that a diff to a BUILD file is only ever its content.

    ./bazelw run //tools:buildifier             # rewrite the files in place
    ./bazelw run //tools:buildifier -- --check  # list the files it would change

buildifier comes from the pinned npm packages ./bazelw installs (testing/js/package.json,
$MOBIUS_NODE_MODULES); //tools:buildifier_test keeps the tree formatted.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def executable() -> str:
    """The buildifier binary for this machine in $MOBIUS_NODE_MODULES."""
    modules = os.environ.get("MOBIUS_NODE_MODULES", "")
    name = f"buildifier-{sys.platform}_{_ARCH.get(platform.machine().lower(), '?')}"
    path = os.path.join(modules, "@bazel", "buildifier", name)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no buildifier at {path}: run through ./bazelw, which installs "
                                f"testing/js's npm packages and sets MOBIUS_NODE_MODULES")
    return path


def build_files(root: str) -> list[str]:
    """Every BUILD, BUILD.bazel, WORKSPACE and .bzl file under ``root``, outside Bazel's
    convenience links and hidden folders."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "bazel-"))
                         and d != "node_modules")
        found += [os.path.join(folder, f) for f in sorted(files)
                  if f in ("BUILD", "BUILD.bazel", "WORKSPACE") or f.endswith(".bzl")]
    return found


def run(root: str, check: bool) -> subprocess.CompletedProcess:
    mode = ["-mode=check"] if check else []
    return subprocess.run([executable(), *mode, *build_files(root)], capture_output=True,
                          text=True, check=False)


def main(argv: list[str]) -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    result = run(root, check="--check" in argv)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
