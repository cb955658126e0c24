"""Running a Python child on a tiny tmpfs, to see what a full disk does to a save.

The tmpfs is mounted in a private user + mount namespace (``unshare -rm``), so
no privileges are needed and nothing outside the test's folder is touched.
Where the machine cannot make such a namespace, the test is skipped.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest


def run_on_small_disk(disk: str, size: str, child: str, *args: str) -> tuple[str, str]:
    """Mounts a ``size`` tmpfs on the folder ``disk`` (made here), runs ``python -c child
    *args`` there, then prints ``rc=<its exit status> left: <what is left on the disk>``;
    returns (stdout, stderr)."""
    if subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine cannot make a user + mount namespace for a small tmpfs")
    os.makedirs(disk)
    quoted = " ".join(shlex.quote(a) for a in args)
    script = (f"mount -t tmpfs -o size={size} tmpfs {disk} && "
              f"{sys.executable} -c \"$0\" {quoted}; echo rc=$? left: $(ls -A {disk})")
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script, child],
                            capture_output=True, text=True, timeout=120)
    return result.stdout, result.stderr
