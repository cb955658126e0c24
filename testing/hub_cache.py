"""A huggingface_hub cache laid out offline, exactly as the hub's downloads lay it out.

``<cache>/models--org--name/blobs/<etag>`` holds each file's bytes;
``refs/<revision>`` names the commit; ``snapshots/<commit>/<file>`` is a
relative symlink to ``../../blobs/<etag>`` (deeper for files in subfolders).
"""

from __future__ import annotations

import hashlib
import os
import shutil


def hub_repo_folder(cache: str, repo_id: str) -> str:
    return os.path.join(cache, "models--" + repo_id.replace("/", "--"))


def make_hub_cache(cache: str, repo_id: str, source: str, revision: str = "main") -> str:
    """Copies every file of ``source`` into the cache as ``repo_id``; returns the snapshot folder."""
    repo = hub_repo_folder(cache, repo_id)
    blobs = os.path.join(repo, "blobs")
    os.makedirs(blobs, exist_ok=True)
    commit = hashlib.sha1(repo_id.encode() + revision.encode()).hexdigest()
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", revision), "w") as f:
        f.write(commit)
    snapshot = os.path.join(repo, "snapshots", commit)
    for root, _, files in os.walk(source):
        for name in files:
            src = os.path.join(root, name)
            relative = os.path.relpath(src, source)
            with open(src, "rb") as f:
                etag = hashlib.sha256(f.read()).hexdigest()
            blob = os.path.join(blobs, etag)
            if not os.path.exists(blob):
                shutil.copyfile(src, blob)
            link = os.path.join(snapshot, relative)
            os.makedirs(os.path.dirname(link), exist_ok=True)
            os.symlink(os.path.relpath(blob, os.path.dirname(link)), link)
    return snapshot
