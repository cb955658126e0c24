"""Keeps Bazel's disk cache (.bazelrc's ``--disk_cache``) under a size cap.

Bazel 4 never deletes from a disk cache: every cold run, clone and edit adds to it, and a
developer machine's reached 23 GB and filled the disk (a cold run then died with "No
space left on device"). ./bazelw runs this at most once a day: past the cap
(``MOBIUS_DISK_CACHE_MAX_GB``, default 20) it deletes the least recently used entries until
the cache is at 80 % of the cap. A deleted entry is a cache miss, never an error: Bazel
runs the action again.

    python3 tools/trim_disk_cache.py [--now]     (--now: even if trimmed today)
"""

from __future__ import annotations

import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FLAG = "build --disk_cache="
_STAMP = ".trimmed"  # its mtime: the last trim
DAY = 24 * 3600


def disk_cache(bazelrc: str = os.path.join(_ROOT, ".bazelrc")) -> str | None:
    """The folder .bazelrc names for the disk cache, ~ expanded."""
    with open(bazelrc) as f:
        for line in f:
            if line.startswith(_FLAG):
                return os.path.expanduser(line[len(_FLAG):].strip())
    return None


def trim(folder: str, max_bytes: int) -> tuple[int, int]:
    """Deletes the least recently used files of ``folder`` until it holds at most 80 % of
    ``max_bytes``, if it holds more than ``max_bytes``. Returns (files, bytes) deleted."""
    entries = []
    for parent, _, names in os.walk(folder):
        for name in names:
            if name == _STAMP:
                continue
            path = os.path.join(parent, name)
            try:
                stat = os.stat(path)
            except FileNotFoundError:  # another Bazel deleted or moved it meanwhile
                continue
            entries.append((max(stat.st_atime, stat.st_mtime), stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return 0, 0
    files = freed = 0
    for _, size, path in sorted(entries):
        if total - freed <= max_bytes * 0.8:
            break
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        files, freed = files + 1, freed + size
    return files, freed


def main(argv: list[str]) -> int:
    folder = disk_cache()
    if folder is None or not os.path.isdir(folder):
        return 0
    stamp = os.path.join(folder, _STAMP)
    if "--now" not in argv and os.path.exists(stamp) and \
            time.time() - os.path.getmtime(stamp) < DAY:
        return 0
    max_gb = float(os.environ.get("MOBIUS_DISK_CACHE_MAX_GB", "20"))
    files, freed = trim(folder, int(max_gb * 2**30))
    with open(stamp, "w"):
        pass
    if files:
        print(f"trim_disk_cache: deleted {files} least recently used entries ({freed / 2**30:.1f}"
              f" GB) of {folder} (cap {max_gb:g} GB, MOBIUS_DISK_CACHE_MAX_GB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
