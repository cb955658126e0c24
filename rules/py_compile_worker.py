"""Build action behind rules/bytecode.bzl's PyCompile: compiles (source, .pyc) pairs.

    python3 rules/py_compile_worker.py SRC PYC [SRC PYC ...]   # or @ARGS_FILE
    python3 rules/py_compile_worker.py --persistent_worker     # Bazel's worker

A library's sources compile in milliseconds; starting Python for each of the ~400
libraries was most of the compile actions' time, so they run in one worker per core.
The .pyc are checked-hash (PEP 552): valid whatever the source file's mtime.
"""

from __future__ import annotations

import py_compile
import sys

from testing import bazel_worker


def compile_pairs(args: list[str]) -> tuple[int, str]:
    if not args or len(args) % 2:
        return 2, "usage: py_compile_worker.py SRC PYC [SRC PYC ...]"
    for source, target in zip(args[::2], args[1::2]):
        py_compile.compile(source, cfile=target, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    return 0, ""


if __name__ == "__main__":
    sys.exit(bazel_worker.main(compile_pairs, sys.argv[1:]))
