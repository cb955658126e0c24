"""Regenerates the EP table section of docs/eps.md from the EP registry and the pipeline.

    ./bazelw run //tools:eps_doc        (or: python3 tools/eps_doc.py)
"""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from mobius.ep.catalog import update_document  # noqa: E402


def main() -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or _ROOT
    path = os.path.join(root, "docs", "eps.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(update_document(text))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
