"""No silent skips: under Bazel every reference dependency (torch, transformers,
onnxruntime-genai, ...) is required, so a machine without one fails the target
with the module's name instead of turning it green by skipping.

Flags, in every Python file of the source tree, each ``pytest.importorskip``
and each ``pytest.skip`` / ``skipif`` outside ``ALLOWED``: the modules whose
skips depend on the machine itself (no GPU, no user namespaces), which no
install can fix.

    python3 -m tools.skip_check      # prints one line per silent skip
"""

from __future__ import annotations

import ast
import os
import sys

#: Files whose skips are about the machine, not about a missing package.
ALLOWED = frozenset({"testing/gpu.py", "testing/small_disk.py"})
_SKIPS = frozenset({"importorskip", "skip", "skipif"})
_SKIPPED_DIRS = frozenset({".git", "third_party", "node_modules", "out"})


def _skip_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each ``pytest.<skip>`` call or ``@pytest.mark.skip*`` in ``tree``."""
    found = []
    for node in ast.walk(tree):
        target = node.func if isinstance(node, ast.Call) else node
        if isinstance(target, ast.Attribute) and target.attr in _SKIPS:
            owner = ast.unparse(target.value)
            if owner in ("pytest", "pytest.mark"):
                found.append((node.lineno, f"{owner}.{target.attr}"))
    return sorted(set(found))


def silent_skips(root: str) -> list[str]:
    """``path:line: pytest.X`` for every skip outside ALLOWED under ``root``."""
    problems = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("bazel-"))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if rel in ALLOWED:
                continue
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            problems += [f"{rel}:{line}: {call}" for line, call in _skip_calls(tree)]
    return problems


if __name__ == "__main__":
    found = silent_skips(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    print("\n".join(found))
    sys.exit(1 if found else 0)
