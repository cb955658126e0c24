"""What ``--overwrite`` may replace: a folder that is recognisably a mobius package.

Every save writes ``mobius_package.json`` into the package, listing the files
it wrote. An existing output is replaced only when it is empty or holds
nothing but what such a manifest lists (a package with one file added by
hand next to it is refused, naming that file): ``--overwrite .`` in a
project folder or in ``$HOME`` must never delete it.

A package saved before the manifest existed is recognised by its file names
alone: at least one ``.onnx`` file, and every entry one that a mobius build
writes (``*.onnx`` and their data files, genai / HF / processor configs,
tokenizer files, ``onnx/`` of the transformers.js layout, ``adapters/``).
"""

from __future__ import annotations

import fnmatch
import json
import os

from mobius.errors import OutputError
from mobius.package.tokenizer_files import TOKENIZER_FILES

MANIFEST = "mobius_package.json"
#: entries of a package saved before the manifest (folder -> names a build wrote there)
_LEGACY = {
    "": ("*.onnx", "*.onnx.data", "genai_config.json", "config.json",
         "generation_config.json", "preprocessor_config.json", "processor_config.json",
         "audio_processor_config.json", *TOKENIZER_FILES),
    "onnx": ("*.onnx", "*.onnx_data"),
    "adapters": ("*.onnx_adapter",),
}
#: foreign entries named in a refusal
_SHOWN = 5


def write_manifest(folder: str, build: dict | None = None) -> None:
    """Lists every file under ``folder`` (a finished staging folder) in its manifest, with
    what ``build`` records of how it was made (source folder, task, dtype, quantization:
    ``mobius run`` / ``mobius verify`` read it back with :func:`read_build`)."""
    files = []
    for root, _, names in os.walk(folder):
        files += [os.path.relpath(os.path.join(root, n), folder).replace(os.sep, "/")
                  for n in names]
    with open(os.path.join(folder, MANIFEST), "w") as f:
        json.dump({"format": 1, "files": sorted(files), "build": build or {}}, f, indent=2)


def read_build(folder: str) -> dict | None:
    """The build record of the package in ``folder``; None where it is not a mobius package
    (no readable manifest) or was saved before the record existed."""
    path = os.path.join(folder, MANIFEST)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            build = json.load(f).get("build")
    except (OSError, ValueError, AttributeError):
        return None
    return build if isinstance(build, dict) and build.get("task") else None


def check_replaceable(output_dir: str) -> None:
    """Refuses to replace ``output_dir`` unless it is empty or a mobius package,
    naming what no mobius build wrote; reads names only, never a weight."""
    listed = _listed(output_dir)
    foreign = _foreign(output_dir, "", listed)
    if listed is None and not foreign and not _has_onnx(output_dir):
        foreign = sorted(os.listdir(output_dir))
    if not foreign:
        return
    shown = ", ".join(foreign[:_SHOWN]) + (", ..." if len(foreign) > _SHOWN else "")
    what = ("is a mobius package, but holds" if listed is not None else "holds")
    raise OutputError(f"output folder {output_dir} {what} {len(foreign)} file(s) or folder(s) "
                      f"that no mobius build wrote ({shown}); refusing to replace it")


def _listed(folder: str) -> set[str] | None:
    """The files the folder's manifest lists (None: no readable manifest)."""
    path = os.path.join(folder, MANIFEST)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            files = json.load(f).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(files, list) or not all(isinstance(n, str) for n in files):
        return None
    return {*files, MANIFEST}


def _foreign(folder: str, relative: str, listed: set[str] | None) -> list[str]:
    """Entries under ``folder`` no build wrote (a foreign folder is named, not entered)."""
    out = []
    with os.scandir(os.path.join(folder, relative) if relative else folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            path = f"{relative}/{entry.name}" if relative else entry.name
            if entry.is_dir(follow_symlinks=False) and _may_hold(path, listed):
                out += _foreign(folder, path, listed)
            elif entry.is_dir(follow_symlinks=False):
                out.append(path + "/")
            elif entry.is_symlink() or not entry.is_file(follow_symlinks=False):
                out.append(path)
            elif not _wrote(path, listed):
                out.append(path)
    return out


def _may_hold(folder: str, listed: set[str] | None) -> bool:
    if listed is None:
        return folder in _LEGACY
    return any(name.startswith(folder + "/") for name in listed)


def _wrote(path: str, listed: set[str] | None) -> bool:
    if listed is not None:
        return path in listed
    folder, _, name = path.rpartition("/")
    return any(fnmatch.fnmatchcase(name, p) for p in _LEGACY.get(folder, ()))


def _has_onnx(folder: str) -> bool:
    """An old package holds a model: names alone (tokenizer files only) are not enough."""
    return any(name.endswith(".onnx") for sub in ("", "onnx")
               if os.path.isdir(os.path.join(folder, sub))
               for name in os.listdir(os.path.join(folder, sub)))
