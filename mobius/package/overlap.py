"""The output never overlaps the input: ``mobius build --model C C --overwrite`` must not eat C."""

from __future__ import annotations

import os

from mobius.checkpoint_files import hub_blobs_folder
from mobius.errors import OutputError


def protected_folder(source: str) -> str:
    """What a build from ``source`` must not touch: the folder, or its whole hub cache repo."""
    blobs = hub_blobs_folder(source)
    if blobs is not None:  # models--org--name/snapshots/<rev>: protect models--org--name
        return os.path.dirname(blobs)
    return os.path.realpath(source)


def check_no_overlap(output_dir: str, source: str) -> None:
    """Refuses an output that is, contains or lies inside the checkpoint being read."""
    out = os.path.realpath(output_dir)
    protected = protected_folder(source)
    common = os.path.commonpath([out, protected])
    if common == protected:
        where = "is" if out == protected else "lies inside"
    elif common == out:
        where = "contains"
    else:
        return
    raise OutputError(f"output folder {output_dir} {where} the input checkpoint {source}; "
                      f"choose another output folder")
