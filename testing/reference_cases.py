"""Where a test finds the outputs of its cases module (//rules:references.bzl).

Under Bazel they are the ``reference_cases`` rule's build output in the test's runfiles:
``<cases module's folder>/<module name>_out/<case>/``; a test without that output in its
data fails with the fix in the message. Outside Bazel (plain pytest) ``write_case``
writes them into a temporary folder on first use, with torch, the same bytes (removed when
the process exits).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from types import ModuleType

#: The file write_references leaves in each case folder: runfiles link every file of a
#: built folder into the output tree, and mobius refuses checkpoint files that are links
#: leaving their folder, so tests get the output-tree folder the marker is in.
MARKER = "CASE"

_WRITTEN: dict[tuple[str, str], str] = {}


def case_dir(cases: ModuleType, case: str) -> str:
    """The folder ``cases.write_case(case, folder)`` filled."""
    if case not in cases.CASES:
        raise KeyError(f"{cases.__name__} has no case {case!r}")
    module = cases.__name__.rsplit(".", 1)[-1]
    built = os.path.join(os.path.dirname(cases.__file__), module + "_out", case)
    marker = os.path.join(built, MARKER)
    if os.path.isfile(marker):
        return os.path.dirname(os.path.realpath(marker))
    if "TEST_SRCDIR" in os.environ:
        raise FileNotFoundError(
            f"{built} is missing: give the test references = [\":{module}\"] "
            "(mobius_py_test, //rules:defs.bzl)")
    key = (cases.__name__, case)
    if key not in _WRITTEN:
        folder = tempfile.mkdtemp(prefix=f"{module}-{case}-")
        atexit.register(shutil.rmtree, folder, True)
        cases.write_case(case, folder)
        _WRITTEN[key] = folder
    return _WRITTEN[key]
