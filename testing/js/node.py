"""Runs the harness's Node.js scripts (testing/js/*.mjs) from Python tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


class NodeSetupError(RuntimeError):
    """Node.js or the pinned npm packages are missing (./bazelw installs both)."""


def node_env() -> dict[str, str]:
    modules = os.environ.get("MOBIUS_NODE_MODULES", "")
    if not shutil.which("node"):
        raise NodeSetupError("node is not on PATH; ./bazelw installs Debian's nodejs")
    if not os.path.isdir(modules):
        raise NodeSetupError(f"MOBIUS_NODE_MODULES={modules!r} is not a folder; "
                             "run the tests through ./bazelw, which installs testing/js")
    return {**os.environ, "MOBIUS_NODE_MODULES": modules}


def run_node(script: str, *args: str, timeout: float = 240, cwd: str | None = None) -> dict:
    """``node testing/js/<script> args...``; returns the JSON its last stdout line prints."""
    result = subprocess.run(["node", os.path.join(HERE, script), *args], env=node_env(),
                            capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if result.returncode != 0:
        raise AssertionError(f"node {script} failed ({result.returncode}):\n"
                             f"{result.stderr[-4000:]}\n{result.stdout[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
