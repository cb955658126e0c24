"""Build action behind the ``ep_builds`` rule (//rules:ep_suite.bzl): one EP's suite builds.

    python3 -m testing.write_ep_builds EP HF_DIR OUT_DIR

Builds every (family, dtype[, quant]) that the EP's fusion, parity and golden targets look
at (:func:`suite_keys`) from the tiny transformers checkpoints in ``HF_DIR``
(//testing/tiny:hf) and stores each in ``OUT_DIR`` as testing/ep_builds.py describes.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

from mobius.models.registry import FAMILIES
from mobius.tiny.checkpoint import real_folder
from testing import ep_suite as s
from testing.ep_builds import ERROR, build_dir, write

def suite_keys(ep: str) -> list[tuple[str, str, str | None]]:
    """(family, dtype, quant) of every build the EP's suites ask for under its own EP (the
    generic graphs they compare against are the default EP's, which serves every family)."""
    families = s.ep_family_names(ep)
    keys = [(fam, dtype, None) for fam in families for dtype in s.l1_dtypes(ep)]
    return keys + [(fam, s.primary_dtype(ep), s.GOLDEN_QUANT) for fam in families]


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python3 -m testing.write_ep_builds EP HF_DIR OUT_DIR", file=sys.stderr)
        return 2
    ep, hf_dir, out = argv
    logging.disable(logging.WARNING)  # onnxscript's folding notes, per build: the log stays quiet
    presets = {f.name: f.tiny_preset for f in FAMILIES}
    for family, dtype, quant in suite_keys(ep):
        folder = build_dir(out, family, dtype, quant)
        try:  # the sandbox links each input file: mobius reads the folder they lead to
            checkpoint = real_folder(os.path.join(hf_dir, presets[family]), "config.json")
            built = s.build(checkpoint, family, ep, dtype, quant)
        except Exception:  # recorded for the tests that ask for this build
            os.makedirs(folder)
            with open(os.path.join(folder, ERROR), "w") as f:
                f.write(traceback.format_exc())
            continue
        write(built, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
