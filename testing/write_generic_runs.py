"""Build action behind the ``ep_generic_runs`` rule (//rules:ep_suite.bzl): the generic
graph's runs of the EP parity targets, once (testing/generic_runs.py).

    python3 -m testing.write_generic_runs DEFAULT_BUILDS_ARCHIVE OUT_DIR

For every (family, dtype) of testing/generic_runs.cases that the default EP's builds in
DEFAULT_BUILDS_ARCHIVE (one shard of //ep/default:builds) hold, runs the stored generic graph
for each case and stores the run under OUT_DIR. A build that failed is skipped
(its tests fail on the build); a run that raises is stored as its traceback.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

from testing import ep_builds, generic_runs


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 -m testing.write_generic_runs DEFAULT_BUILDS_ARCHIVE OUT_DIR",
              file=sys.stderr)
        return 2
    builds, out = argv
    logging.disable(logging.WARNING)
    os.makedirs(out, exist_ok=True)
    archive = ep_builds.Archive(builds)
    for (family, dtype), runs in sorted(generic_runs.cases().items()):
        if not archive.holds(family, dtype, None) or archive.failed(family, dtype, None):
            continue  # another shard's family, or a failed build
        built = archive.read(family, dtype, None)
        for name in sorted(runs):
            _write_one(generic_runs.path(out, family, dtype, name), built, family, name)
    return 0


def _write_one(file: str, built, family: str, name: str) -> None:
    try:
        generic_runs.write(file, built, family, name)
    except Exception:  # recorded for the tests that ask for this run
        os.makedirs(os.path.dirname(file), exist_ok=True)
        with open(file + ".error", "w") as f:
            f.write(traceback.format_exc())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
