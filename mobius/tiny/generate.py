"""Build action behind the ``tiny_checkpoint`` rule (//rules:tiny.bzl): writes one tiny preset.

    python3 -m mobius.tiny.generate tiny-llama OUT_DIR
"""

from __future__ import annotations

import sys

from mobius.errors import MobiusError
from mobius.tiny.checkpoint import make_tiny_checkpoint


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m mobius.tiny.generate PRESET OUT_DIR", file=sys.stderr)
        return 2
    name, out = argv
    try:
        make_tiny_checkpoint(name, folder=out)
    except MobiusError as e:
        print(f"mobius: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
