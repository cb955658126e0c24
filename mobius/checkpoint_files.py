"""Which files a checkpoint may hand us: containment judged by name, not by link target.

A checkpoint file is named relative to the checkpoint folder (by an index, by
the tokenizer list, ...). The name must be a plain relative path that stays
inside the folder. Where the file's symlinks lead is then checked too: into the
folder itself, or, for a huggingface_hub cache snapshot
(``models--org--name/snapshots/<rev>/``), into that same repository's
``blobs/`` folder, where the hub keeps every snapshot file's bytes. Anything
else (a link to /etc/passwd, to another repository's blobs, to a device) is
refused, so no file outside the checkpoint is read or copied into a package.
"""

from __future__ import annotations

import os

from mobius.errors import MobiusError


def hub_blobs_folder(folder: str) -> str | None:
    """The ``blobs/`` folder of the hub cache repository that ``folder`` is a snapshot of
    (``folder`` as given, or with its links resolved)."""
    for path in (os.path.abspath(folder), os.path.realpath(folder)):
        snapshots = os.path.dirname(path)
        repo = os.path.dirname(snapshots)
        blobs = os.path.join(repo, "blobs")
        if (os.path.basename(snapshots) == "snapshots" and os.path.isdir(blobs)
                and os.path.basename(repo).startswith(("models--", "datasets--", "spaces--"))):
            return os.path.realpath(blobs)
    return None


def _inside(path: str, folder: str) -> bool:
    return os.path.commonpath([path, folder]) == folder


def contained_file(folder: str, name: str, what: str,
                   error: type[MobiusError] = MobiusError) -> str:
    """The path of the checkpoint file ``name``; raises ``error`` if it leaves the checkpoint.

    ``what`` says who named the file (e.g. "model.safetensors.index.json"), for
    the message. The file need not exist; the caller reports a missing one.
    """
    if not isinstance(name, str) or not name or "\0" in name:
        raise error(f"{what} names an invalid file: {name!r}")
    normalized = os.path.normpath(name)
    if os.path.isabs(name) or normalized == ".." or normalized.startswith(".." + os.sep):
        raise error(f"{what} points outside the checkpoint folder: {name!r}")
    path = os.path.join(os.path.abspath(folder), normalized)
    if not os.path.lexists(path):
        return path
    target = os.path.realpath(path)
    blobs = hub_blobs_folder(folder)
    if not (_inside(target, os.path.realpath(folder)) or (blobs and _inside(target, blobs))):
        raise error(f"{name!r} (named by {what}) is a link that leads outside the checkpoint "
                    f"folder, to {target}")
    if os.path.exists(target) and not os.path.isfile(target):
        raise error(f"{name!r} (named by {what}) is not a regular file")
    return path
