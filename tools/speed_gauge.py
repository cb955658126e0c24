"""How fast this machine runs Python right now: a fixed CPU workload, timed.

The CI machine kind's speed moves within the day (the same cold suite took 664 s and
1,045 s an hour apart, while a fixed Python loop's time varied 1.8x), so a suite time
means little without it. .ci/run prints it before and after ``bazel test``; the cold
figures in docs/testing.md name the gauge they were taken at.

    python3 tools/speed_gauge.py    ->  speed gauge: 0.50 s (...)
"""

from __future__ import annotations

import time

STEPS = 10_000_000


def gauge_seconds(steps: int = STEPS) -> float:
    """Seconds for ``steps`` iterations of a plain Python loop (interpreter-bound, like
    most of the suite: graph building, pytest, imports)."""
    start = time.perf_counter()
    total = 0
    for i in range(steps):
        total += i * i
    return time.perf_counter() - start


def main() -> int:
    print(f"speed gauge: {gauge_seconds():.2f} s ({STEPS:,}-step Python loop; lower is faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
