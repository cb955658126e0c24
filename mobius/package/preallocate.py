"""Reserving a data file's blocks on disk before it is written.

A float32 package's data file is GBs written in hundreds of pieces (mostly
file-to-file copies). Left alone, ext4 allocates its blocks piece by piece
as delayed allocation is resolved at writeback, and that bookkeeping was a
fifth of a llama3.1-8b-4l build's CPU (perf; docs/benchmarks.md as of fedc923). Its final
size is known before the first byte (the sum of the external initializers),
so ``Preallocation`` reserves it in one ``fallocate`` when the writing starts:
the 8b-4l write took 6.3-8.0 s instead of 7.8-10.8 s, alternating.

``FALLOC_FL_KEEP_SIZE`` reserves blocks without changing the file's size, so
a wrong estimate never adds bytes to the file; ``close()`` releases any block
past what was written. A full disk is reported at once (ENOSPC, before GBs
are written); any other failure (no ``fallocate`` here, a file system
without it) leaves the file to be allocated as before.
"""

from __future__ import annotations

import ctypes
import errno
import os

from mobius.package.writeback import libc_function, open_being_written

#: <linux/falloc.h>: allocate, but leave the file size as it is
FALLOC_FL_KEEP_SIZE = 1


def _fallocate():
    return libc_function("fallocate",
                         [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64])


class Preallocation:
    """``started()``: the writing of ``path`` (onnx-ir's staged file) has begun; reserve
    ``size`` bytes for it. ``close()``: it is done; release the blocks it did not use."""

    def __init__(self, path: str, size: int):
        self._path = path
        self._size = size
        self._fd = -1

    def started(self) -> None:
        fn = _fallocate()
        if fn is None or self._size <= 0 or self._fd >= 0:
            return
        self._fd = open_being_written(self._path, os.O_WRONLY)
        if self._fd >= 0 and fn(self._fd, FALLOC_FL_KEEP_SIZE, 0, self._size) != 0:
            if ctypes.get_errno() == errno.ENOSPC:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            os.ftruncate(self._fd, os.fstat(self._fd).st_size)  # frees blocks past the end
        finally:
            os.close(self._fd)
            self._fd = -1
