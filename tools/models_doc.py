"""Regenerates docs/models.md from the model and EP registries."""

import os
import sys

from mobius.models.catalog import models_markdown


def main() -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or os.getcwd()
    path = os.path.join(root, "docs", "models.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(models_markdown())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
