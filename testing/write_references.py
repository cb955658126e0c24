"""Build action behind ``reference_cases`` (//rules:references.bzl): runs a cases module's
``write_case`` for each of its ``CASES``.

    python3 -m testing.write_references CASES_FILE OUT_DIR [NAME=VALUE ...]
    python3 -m testing.write_references --persistent_worker   # Bazel's worker

As a persistent worker torch and transformers are imported once per worker process
(~8 s), not once per test. The cases file is executed afresh for every request (it is
an action input, not part of the worker), so an edit to it never meets a stale copy.
NAME=VALUE pairs (the rule's ``env``: where its ``data`` lies) are set in the environment
while the cases are written and restored after, so one request never sees another's.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import shutil
import sys
from collections.abc import Iterator

from testing import bazel_worker
from testing.reference_cases import MARKER

USAGE = "usage: python3 -m testing.write_references CASES_FILE OUT_DIR [NAME=VALUE ...]"


def write_references(args: list[str]) -> tuple[int, str]:
    """Fills ``OUT_DIR/<case>/`` for every case: (exit code, error message)."""
    if len(args) < 2 or not all("=" in a for a in args[2:]):
        return 2, USAGE
    with _environment(dict(a.split("=", 1) for a in args[2:])):
        return _write(*args[:2])


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` set in os.environ for the block, the previous values back after it."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _write(cases_file: str, out: str) -> tuple[int, str]:
    module = runpy.run_path(cases_file, run_name="reference_cases")
    if "CASES" not in module or "write_case" not in module:
        return 1, f"{cases_file}: a cases module defines CASES and write_case(case, folder)"
    shutil.rmtree(out, ignore_errors=True)
    for case in module["CASES"]:
        folder = os.path.join(out, case)
        os.makedirs(folder)
        module["write_case"](case, folder)
        with open(os.path.join(folder, MARKER), "w") as f:  # testing/reference_cases finds it
            f.write(case + "\n")
    return 0, ""


def main(argv: list[str]) -> int:
    # One intra-op thread, as the tests ran transformers: on tiny models a second thread
    # only spins, and Bazel runs this worker beside other actions and tests.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return bazel_worker.main(write_references, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
