"""Putting a finished package in place, crash-consistently, and cleaning up after crashes.

A package is written into ``.<out>.partial-<pid>-<rand>`` beside the output,
fsynced, then renamed to ``.<out>.ready-<pid>-<rand>`` (the marker that it is
complete). Placing it, with the parent folder locked (flock, released by the
kernel if the process dies):

- no overwrite: renameat2(RENAME_NOREPLACE), else a plain rename (which only
  replaces an empty folder): an output that appeared meanwhile is never lost;
- overwrite: renameat2(RENAME_EXCHANGE) swaps old and new in one step; the
  fallback renames the old package to ``.<out>.old-<pid>-<rand>`` first. Only
  an empty folder or a mobius package is replaced (manifest.py), checked
  again here, under the lock.

At any kill, the output is the complete old or the complete new package, or
(fallback only, between its two renames) missing with both kept hidden.
:func:`recover` (run by every save and by the CLI before a build) finishes or
undoes what a dead process left, and removes its staging folders.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import signal
import tempfile

from mobius.errors import OutputError
from mobius.package.atomic_rename import Unsupported, rename_exchange, rename_noreplace
from mobius.package.manifest import check_replaceable

logger = logging.getLogger(__name__)


class OutputExistsError(OutputError):
    """The output folder is not empty and replacing it was not asked for."""

    def __init__(self, path: str, when: str = "is not empty"):
        super().__init__(f"output folder {path} {when}; save(..., overwrite=True) replaces it")
        self.path = path
        self.when = when


def crash_point(step: str) -> None:
    """Test hook: MOBIUS_SAVE_CRASH_AT=<step>[:INT] kills this process at that step of save."""
    wanted = os.environ.get("MOBIUS_SAVE_CRASH_AT", "")
    name, _, sig = wanted.partition(":")
    if name == step:
        os.kill(os.getpid(), signal.SIGINT if sig == "INT" else signal.SIGKILL)


def make_staging(output_dir: str) -> str:
    parent, base = os.path.split(output_dir)
    staging = tempfile.mkdtemp(prefix=f".{base}.partial-{os.getpid()}-", dir=parent)
    return staging


def mark_ready(staging: str) -> str:
    """fsyncs the staging folder's files, then renames it to its ``.ready-`` name."""
    for root, folders, files in os.walk(staging, topdown=False):
        for name in files + folders:
            _fsync(os.path.join(root, name))
    _fsync(staging)
    crash_point("fsync")
    ready = staging.replace(".partial-", ".ready-", 1)
    os.rename(staging, ready)
    _fsync(os.path.dirname(staging))
    crash_point("ready")
    return ready


def place(ready: str, output_dir: str, overwrite: bool) -> None:
    """Moves the complete package ``ready`` to ``output_dir`` (see the module docstring).

    An interrupt after the decisive rename raises InterruptedAfterSave: the
    package is in place, and the next save cleans up what is left.
    """
    with locked(os.path.dirname(output_dir)):
        recover(output_dir)
        if overwrite and os.path.isdir(output_dir) and not os.path.islink(output_dir):
            check_replaceable(output_dir)  # again: files may have appeared while building
            step, leftover = _swap(ready, output_dir)
        else:
            step, leftover = _place_new(ready, output_dir), None
        try:
            crash_point(step)
            if leftover:
                shutil.rmtree(leftover, ignore_errors=True)
            _fsync(os.path.dirname(output_dir))
        except KeyboardInterrupt:
            raise InterruptedAfterSave(output_dir) from None


class InterruptedAfterSave(KeyboardInterrupt):
    """Ctrl-C arrived after the package was put in place: it is complete."""

    def __init__(self, path: str):
        super().__init__(path)
        self.path = path


def _place_new(ready: str, output_dir: str) -> str:
    try:
        try:
            rename_noreplace(ready, output_dir)
            return "rename"
        except (Unsupported, FileExistsError):
            pass
        os.rename(ready, output_dir)  # replaces an empty folder only, never a file or content
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise OutputExistsError(output_dir, "appeared while building and is not empty") from None
        raise
    return "rename"


def _swap(ready: str, output_dir: str) -> tuple[str, str]:
    """Swaps the new package in; returns (crash step, folder now holding the old package)."""
    try:
        rename_exchange(ready, output_dir)
        return "exchange", ready
    except Unsupported:
        pass
    old = ready.replace(".ready-", ".old-", 1)
    os.rename(output_dir, old)
    try:
        crash_point("rename-old")
        os.rename(ready, output_dir)
    except BaseException:
        if not os.path.lexists(output_dir):
            os.rename(old, output_dir)
        raise
    return "rename-new", old


@contextlib.contextmanager
def locked(folder: str):
    """An exclusive flock on ``folder`` itself: no lock file, none left behind by a crash."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:  # file systems without flock: renameat2 still guards the output
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        yield
    finally:
        os.close(fd)


def recover(output_dir: str) -> None:
    """Finishes or undoes what dead saves into ``output_dir`` left; removes their staging."""
    parent, base = os.path.split(output_dir)
    pattern = re.compile(rf"\.{re.escape(base)}\.(partial|ready|old)-(\d+)-\w+")
    try:
        names = os.listdir(parent)
    except OSError:
        return
    leftovers: dict[str, dict[str, str]] = {}
    for name in names:
        match = pattern.fullmatch(name)
        if match and not _alive(int(match.group(2))):
            tag = name[name.index("-", len(base) + 2) + 1:]
            leftovers.setdefault(tag, {})[match.group(1)] = os.path.join(parent, name)
    for kinds in leftovers.values():
        _recover_one(output_dir, kinds)


def _recover_one(output_dir: str, kinds: dict[str, str]) -> None:
    partial, ready, old = kinds.get("partial"), kinds.get("ready"), kinds.get("old")
    if partial:
        shutil.rmtree(partial, ignore_errors=True)
    if old and not os.path.lexists(output_dir):
        if ready:
            os.rename(ready, output_dir)
            logger.warning("finished an interrupted --overwrite: %s holds the new package",
                           output_dir)
            ready = None
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(old, output_dir)
            logger.warning("undid an interrupted --overwrite: %s holds the old package again",
                           output_dir)
    elif old and ready:
        logger.warning("kept %s and %s: an interrupted save left them and %s was recreated since",
                       old, ready, output_dir)
        return
    elif old:
        shutil.rmtree(old, ignore_errors=True)
    if ready:
        shutil.rmtree(ready, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_disk_full(e: OSError) -> bool:
    """ENOSPC / EDQUOT, also as numpy's errno-less "N requested and M written"."""
    return e.errno in (errno.ENOSPC, errno.EDQUOT) or (
        e.errno is None and "requested and" in str(e) and "written" in str(e)
    )
