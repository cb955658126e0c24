"""Build action behind the ``hf_checkpoints`` rule (//rules:tiny.bzl): transformers' own tiny
checkpoints (testing/hf_checkpoints.py, seed 0) for many presets, in one process so torch is
imported once.

    python3 -m testing.write_hf_checkpoints OUT_DIR tiny-llama tiny-qwen3 ...
"""

from __future__ import annotations

import os
import sys

from testing.hf_checkpoints import make_hf_checkpoint


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python3 -m testing.write_hf_checkpoints OUT_DIR PRESET...", file=sys.stderr)
        return 2
    out, presets = argv[0], argv[1:]
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging

    logging.disable_progress_bar()  # keep the build log quiet
    for preset in presets:
        make_hf_checkpoint(os.path.join(out, preset), preset)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
