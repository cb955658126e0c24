"""Independent pieces of one numpy job (chunks of a weight) run on a few threads.

numpy releases the GIL in its loops, so pieces that write disjoint parts of
one output overlap on several cores; each piece's result is the same
whatever the order.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

#: threads for one job (each holds its own temporaries)
MAX_THREADS = min(4, os.cpu_count() or 1)


def run_on_threads(work: Callable, items: Iterable, threads: int) -> None:
    """``work(item)`` for every item, on up to ``threads`` threads (in order on one);
    the first error a piece raises reaches the caller."""
    items = list(items)
    threads = min(threads, len(items))
    if threads <= 1:
        for item in items:
            work(item)
        return
    with ThreadPoolExecutor(threads, "mobius-worker") as pool:
        list(pool.map(work, items))
