"""Cyclic garbage collection on a memory budget, for processes that make many graphs.

An onnx_ir graph is a web of reference cycles (nodes <-> values), and CPython's default
collector walks the young objects every 700 allocations and the whole heap ever more
often, a heap that here only grows (imported modules, cached builds). Measured: a third
of an EP suite's CPU (9.7 of 27 s for //ep/cuda:fusion), ~20 % of the EP suites' build
action. So a long-lived test or build process freezes what is alive once its modules are
imported (never garbage), collects nothing automatically, and collects only when its
resident size has grown by ``budget`` since the last collection (the garbage of finished
builds grew by 0.07-0.4 GB a test process without collecting).
"""

from __future__ import annotations

import gc
import os


class GarbageBudget:
    """``start()`` once the long-lived objects exist, ``step()`` between units of work."""

    def __init__(self, budget: int = 1 << 30) -> None:
        self.budget = budget
        self.baseline = 0

    def start(self) -> None:
        gc.disable()
        gc.collect()
        gc.freeze()
        self.baseline = resident_bytes()

    def step(self) -> None:
        if resident_bytes() > self.baseline + self.budget:
            gc.collect()
            self.baseline = resident_bytes()


def resident_bytes() -> int:
    """This process's resident set size (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
