"""Starting the disk writeback of a data file while the rest of it is still being written.

A package is fsynced before it is put in place (output_swap.mark_ready), so
the build's wall time includes writing every dirty page to disk. Left to the
kernel, writeback of a multi-GB data file starts late (at the dirty-page
threshold) and the final fsync waits for the rest. Asking the kernel to
start writing each finished stretch of the file
(``sync_file_range(SYNC_FILE_RANGE_WRITE)``, Linux) overlaps the disk with
the rest of the build, so the fsync finds little left.

Advisory only: durability still comes from mark_ready's fsync. Where the
call does not exist or fails, nothing happens.
"""

from __future__ import annotations

import ctypes
import glob
import os
import queue
import threading

#: bytes written before the next stretch is handed to the kernel
STRETCH = 32 << 20
#: <linux/fs.h>: start writeback of the range's dirty pages, do not wait for it
SYNC_FILE_RANGE_WRITE = 2


def libc_function(name: str, argtypes: list):
    """The C library's ``name`` taking ``argtypes`` and returning an int (errno kept for
    ``ctypes.get_errno``), or None where this platform has no such function."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def _sync_file_range():
    return libc_function("sync_file_range",
                         [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint])


class EarlyWriteback:
    """``written(offset)``: every byte of ``path`` before ``offset`` is written.

    A worker thread hands each new stretch of at least ``stretch`` bytes to the
    kernel, so a call that blocks on a full device queue never stalls the
    writer. ``close()`` lets it finish the stretches handed over and stops it;
    the rest of the file is left to the fsync that follows.

    onnx-ir writes the data file as ``.<name>.<random>/<name>`` beside
    ``path`` and renames it into place when complete: the file being written
    is whichever of the two exists at the first ``written()`` call.
    """

    def __init__(self, path: str, stretch: int | None = None):
        self._path = path
        self._stretch = stretch or STRETCH
        self._fn = _sync_file_range()
        self._fd: int | None = None
        self._started = 0
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def written(self, offset: int) -> None:
        if self._fn is None:
            return
        if self._fd is None:
            self._fd = open_being_written(self._path)
        if self._fd < 0 or offset - self._started < self._stretch:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, args=(self._fd,),
                                            name="mobius-writeback", daemon=True)
            self._thread.start()
        self._queue.put((self._started, offset - self._started))
        self._started = offset

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._fd is not None and self._fd >= 0:
            os.close(self._fd)
        self._fd = None

    def _run(self, fd: int) -> None:
        while (item := self._queue.get()) is not None:
            if self._fn(fd, item[0], item[1], SYNC_FILE_RANGE_WRITE) != 0:
                break  # unsupported here (ENOSYS, EINVAL, ESPIPE): stop asking
        else:
            return
        while self._queue.get() is not None:
            pass


def open_being_written(path: str, flags: int = os.O_RDONLY) -> int:
    """A descriptor (``flags``) of the file being written to ``path``, or -1."""
    folder, name = os.path.split(path)
    pattern = os.path.join(glob.escape(folder), f".{glob.escape(name)}.*", glob.escape(name))
    staged = glob.glob(pattern)
    for candidate in [*sorted(staged, key=_mtime, reverse=True), path]:
        try:
            return os.open(candidate, flags)
        except OSError:
            continue
    return -1


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
