"""Directory renames that never replace what they must not: renameat2(2) through ctypes.

``rename_noreplace`` fails if the target exists at the moment of the rename;
``rename_exchange`` swaps two paths in one step, so the target is never
missing. Where the kernel, libc or file system lacks renameat2 (non-Linux,
some network file systems), ``Unsupported`` is raised and the caller falls
back to plain renames (see output_swap.py).
"""

from __future__ import annotations

import ctypes
import errno
import os

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


class Unsupported(Exception):
    """renameat2 (or this flag) is not available here."""


def _renameat2():
    if os.environ.get("MOBIUS_SAVE_PORTABLE_RENAME"):  # tests: exercise the fallback
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _call(src: str, dst: str, flags: int) -> None:
    function = _renameat2()
    if function is None:
        raise Unsupported()
    if function(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        raise Unsupported()
    raise OSError(code, os.strerror(code), dst)


def rename_noreplace(src: str, dst: str) -> None:
    """Renames ``src`` to ``dst``; FileExistsError if ``dst`` exists (even an empty folder)."""
    _call(src, dst, _RENAME_NOREPLACE)


def rename_exchange(src: str, dst: str) -> None:
    """Atomically swaps ``src`` and ``dst`` (both must exist)."""
    _call(src, dst, _RENAME_EXCHANGE)
