"""Build action behind the ``ep_builds`` rule (//rules:ep_suite.bzl): every EP suite's
builds of one shard of the families.

    python3 -m testing.write_ep_builds HF_DIR SHARD SHARDS EP=OUT_ARCHIVE...

Builds every (family, dtype[, quant]) that each EP's fusion, parity and golden targets
look at (:func:`suite_keys`), for the families of shard SHARD of SHARDS, from the tiny
transformers checkpoints in ``HF_DIR`` (//testing/tiny:hf), and stores each in that EP's
archive ``OUT_ARCHIVE`` as testing/ep_builds.py describes. One family at a time, every EP
in turn, in mobius.shared_construction: a family's generic graphs are constructed once per
dtype (per structural flags) and each EP's pipeline runs on its own clone of them.
"""

from __future__ import annotations

import logging
import contextlib
import os
import sys
import traceback

from mobius.models.registry import FAMILIES
from mobius.shared_construction import shared_construction
from mobius.tiny.checkpoint import real_folder
from testing import ep_suite as s
from testing.ep_builds import ArchiveWriter
from testing.garbage_budget import GarbageBudget


#: resident growth between garbage collections: two of these actions run side by side
_GARBAGE_BUDGET = 512 << 20


def suite_keys(ep: str) -> list[tuple[str, str, str | None]]:
    """(family, dtype, quant) of every build the EP's suites ask for under its own EP (the
    generic graphs they compare against are the default EP's, which serves every family)."""
    families = s.ep_family_names(ep)
    keys = [(fam, dtype, None) for fam in families for dtype in s.l1_family_dtypes(ep, fam)]
    if not s.takes_golden_quant(ep):  # refused up front: ep/golden_suite.py checks that
        return keys
    return keys + [(fam, s.primary_dtype(ep), s.GOLDEN_QUANT) for fam in families]


def shard_builds(eps: list[str], shard: int, shards: int) -> list[tuple]:
    """(ep, family, dtype, quant) of the shard's families (every ``shards``-th, from
    ``shard``), ordered so that the builds sharing a construction follow each other."""
    families = s.family_names()[shard::shards]
    builds = [(ep, *key) for ep in eps for key in suite_keys(ep) if key[0] in families]
    return sorted(builds, key=lambda b: (families.index(b[1]), b[2]))  # stable: EP order kept


def main(argv: list[str]) -> int:
    if len(argv) < 4 or not all("=" in a for a in argv[3:]):
        print("usage: python3 -m testing.write_ep_builds HF_DIR SHARD SHARDS EP=OUT_ARCHIVE...",
              file=sys.stderr)
        return 2
    hf_dir, shard, shards = argv[0], int(argv[1]), int(argv[2])
    outs = dict(a.split("=", 1) for a in argv[3:])
    logging.disable(logging.WARNING)  # onnxscript's folding notes, per build: the log stays quiet
    presets = {f.name: f.tiny_preset for f in FAMILIES}
    garbage = GarbageBudget(_GARBAGE_BUDGET)
    garbage.start()
    # an EP serving none of the shard's families: an empty archive
    with contextlib.ExitStack() as stack, shared_construction():
        writers = {ep: stack.enter_context(ArchiveWriter(path)) for ep, path in outs.items()}
        for ep, family, dtype, quant in shard_builds(list(outs), shard, shards):
            _build_one(writers[ep], hf_dir, presets[family], family, ep, dtype, quant)
            garbage.step()
    return 0


def _build_one(writer: ArchiveWriter, hf_dir: str, preset: str, family: str, ep: str,
               dtype: str, quant: str | None) -> None:
    try:  # the sandbox links each input file: mobius reads the folder they lead to
        checkpoint = real_folder(os.path.join(hf_dir, preset), "config.json")
        built = s.build(checkpoint, family, ep, dtype, quant)
    except Exception:  # recorded for the tests that ask for this build
        writer.write_error(family, dtype, quant, traceback.format_exc())
        return
    writer.write(built, family, dtype, quant)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
