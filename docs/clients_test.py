"""Runs the copy-paste examples of docs/clients/*.md exactly as a reader would.

Each page's ```sh lines run in a fresh folder (``mobius`` as ``python3 -m
mobius``; ``npm install`` is replaced by a link to the pinned packages ./bazelw
installed), then its ```python or ```js example. The examples must exit 0 and
print what generation produced.
"""

import os
import re
import subprocess
import sys

import pytest

from testing.js.node import node_env

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def _blocks(page: str) -> list[tuple[str, str]]:
    with open(os.path.join(DOCS, page)) as f:
        return BLOCK.findall(f.read())


def _run(cmd, cwd, env, shell=False) -> str:
    result = subprocess.run(cmd, cwd=cwd, env=env, shell=shell, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, f"{cmd}:\n{result.stderr[-3000:]}"
    return result.stdout


def run_page(page: str, folder) -> str:
    env = {**node_env(), "PYTHONPATH": ROOT, "MOBIUS_CACHE": str(folder / "cache")}
    output = ""
    for language, code in _blocks(page):
        if language == "sh":
            for line in code.strip().splitlines():
                if line.startswith("npm install"):
                    os.symlink(env["MOBIUS_NODE_MODULES"], folder / "node_modules")
                    continue
                assert line.startswith("mobius "), line
                _run([sys.executable, "-m", "mobius", *line.split()[1:], "--quiet"], folder, env)
        elif language == "python":
            (folder / "example.py").write_text(code)
            output += _run([sys.executable, "example.py"], folder, env)
        elif language == "js":
            (folder / "example.mjs").write_text(code)
            output += _run(["node", "example.mjs"], folder, env)
    return output


@pytest.mark.parametrize("page,expected", [
    ("python-genai.md", r"^The quick brown fox"),
    ("node.md", r"^generated token ids:( \d+){8}$"),
    ("transformers-js.md", r"^The quick brown fox[\s\S]*^t5: "),
])
def test_page_example_runs(tmp_path, page, expected):
    output = run_page(page, tmp_path)
    assert re.search(expected, output.strip(), re.M), output
