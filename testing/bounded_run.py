"""Runs ``python -m mobius`` in a child bounded in memory (RLIMIT_AS) and time.

A resource bomb that slips past the checks then fails the test (MemoryError,
a kill, a timeout) instead of taking the machine down.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_mobius(args: list[str], *, memory_bytes: int = 3 << 30, timeout: float = 120,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    child_env = {k: v for k, v in os.environ.items() if not k.startswith("MOBIUS_SAVE_")}
    child_env.update(env or {})
    child_env["PYTHONPATH"] = ROOT
    child_env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run([sys.executable, "-m", "mobius", *args], env=child_env,
                          preexec_fn=limit, capture_output=True, text=True, timeout=timeout)
