"""tools/trim_disk_cache.py: past its cap a disk cache loses its least recently used
entries down to 80 % of the cap; under it, nothing."""

from __future__ import annotations

import os

from tools import trim_disk_cache


def _entry(folder, name: str, size: int, used: int) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, (used, used))
    return str(path)


def test_the_least_recently_used_entries_go_first(tmp_path):
    old = _entry(tmp_path, "cas/ab/old", 400, used=1_000)
    middle = _entry(tmp_path, "ac/cd/middle", 400, used=2_000)
    new = _entry(tmp_path, "cas/ef/new", 400, used=3_000)
    assert trim_disk_cache.trim(str(tmp_path), 900) == (2, 800)  # 1,200 > 900 -> <= 720
    assert not os.path.exists(old) and not os.path.exists(middle) and os.path.exists(new)


def test_a_cache_under_its_cap_is_left_alone(tmp_path):
    kept = [_entry(tmp_path, f"cas/{i}", 300, used=1_000 + i) for i in range(3)]
    assert trim_disk_cache.trim(str(tmp_path), 1_000) == (0, 0)
    assert all(map(os.path.exists, kept))


def test_the_folder_is_the_one_bazelrc_names(tmp_path):
    rc = tmp_path / "bazelrc"
    rc.write_text("build --jobs=2\nbuild --disk_cache=~/somewhere/disk\n")
    assert trim_disk_cache.disk_cache(str(rc)) == os.path.expanduser("~/somewhere/disk")
    assert trim_disk_cache.disk_cache() is not None  # the repository's own .bazelrc names one
