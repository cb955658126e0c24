"""What a folder holds, to compare before and after: a refused build must change nothing."""

from __future__ import annotations

import os


def file_contents(folder) -> dict[str, bytes]:
    """Every file below ``folder`` by its relative path, with its bytes."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = f.read()
    return out
