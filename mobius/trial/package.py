"""A built package, opened for ``mobius run`` / ``mobius verify``: what its manifest records
of the build (task, source checkpoint, dtype, quantization) and its files, checked.

A folder without that record is refused rather than guessed at: the same ONNX file
can be a classifier or an embedder, and verify needs the checkpoint it came from.
"""

from __future__ import annotations

import dataclasses
import json
import os

from mobius.errors import MobiusError
from mobius.package.manifest import MANIFEST, read_build


@dataclasses.dataclass(frozen=True)
class Package:
    folder: str
    task: str
    source: str | None  #: the checkpoint folder it was built from, as recorded
    dtype: str  #: f32 / f16 / bf16 (activations)
    quant: str | None  #: int4 / int8 weights, or None
    layout: str

    def check_genai(self, command: str) -> None:
        """A decoder runs through onnxruntime-genai, which loads the genai layout only."""
        if not os.path.isfile(os.path.join(self.folder, "genai_config.json")):
            raise MobiusError(f"mobius {command} runs a {self.task} package through "
                              f"onnxruntime-genai, but {self.folder} (layout {self.layout}) has "
                              f"no genai_config.json; build it with --layout genai")

    def model_file(self) -> str:
        """The package's single ONNX model (model.onnx, or the transformers.js layout's one
        file under onnx/)."""
        path = os.path.join(self.folder, "model.onnx")
        if os.path.isfile(path):
            return path
        sub = os.path.join(self.folder, "onnx")
        found = sorted(n for n in os.listdir(sub) if n.endswith(".onnx")) if os.path.isdir(
            sub) else []
        if len(found) != 1:
            raise MobiusError(f"{self.folder}: expected one model.onnx, found {found or 'none'}")
        return os.path.join(sub, found[0])

    def config(self) -> dict:
        """The package's config.json (the checkpoint's, carried by every layout)."""
        path = os.path.join(self.folder, "config.json")
        if not os.path.isfile(path):
            raise MobiusError(f"{self.folder}: config.json is missing; rebuild the package")
        with open(path, encoding="utf-8") as f:
            return json.load(f)


def open_package(folder: str) -> Package:
    """The package in ``folder``; a clear error where it is not one or lacks a file it lists."""
    if not os.path.isdir(folder):
        raise MobiusError(f"{folder} is not a folder (give a package `mobius build` wrote)")
    build = read_build(folder)
    if build is None:
        raise MobiusError(f"{folder} is not a mobius package: no {MANIFEST} with a build "
                          f"record (build it with `mobius build`, or rebuild an older one)")
    with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
        listed = json.load(f).get("files", [])
    missing = [n for n in listed if not os.path.isfile(os.path.join(folder, n))]
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise MobiusError(f"package {folder} is missing {len(missing)} file(s) it was "
                          f"written with ({shown}); rebuild it")
    return Package(os.path.abspath(folder), str(build["task"]), build.get("source"),
                   str(build.get("dtype") or "f32"), build.get("quant"),
                   str(build.get("layout") or "genai"))
