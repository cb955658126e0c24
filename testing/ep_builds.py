"""The stored form of the EP suites' builds, as the ``ep_builds`` actions
(testing/write_ep_builds.py) write them and testing/ep_suite.Builds reads them.

Each (EP, shard) is one uncompressed zip archive. A build lives in it under
``<family>/<dtype>[-<quant>]/``: its models as self-contained ``<key>.onnx`` members and the
rest of the result (package metadata, config, warnings) as ``built.pickle``; or
``error.txt``, the traceback of a build that raised, so that only the tests of that build
fail, with the build's own message. The EP's fusion (L2), parity (L3) and golden (L5)
targets load what was built once instead of building it three times, and hand the stored
bytes straight to onnxruntime. Outside Bazel there is no archive (:func:`prebuilt_archives`
is None) and the suites build in-process.

Why one file rather than a folder per build: ~9,000 files as a directory tree became
~9,000 symlinks in the sandbox of every test that reads them (3-6 s of Bazel's time per
such test in a cold run, as much again to delete them) and as many entries to digest and
cache; an archive is one input.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import zipfile

import onnx_ir as ir

_PICKLE = "built.pickle"
_ERROR = "error.txt"
SUFFIX = ".zip"


def build_dir(family: str, dtype: str, quant: str | None) -> str:
    """The archive folder of one build."""
    return f"{family}/{dtype}-{quant}" if quant else f"{family}/{dtype}"


class ArchiveWriter:
    """Writes builds into a new archive at ``path``; use as a context manager."""

    def __init__(self, path: str) -> None:
        self._zip = zipfile.ZipFile(path, "w", zipfile.ZIP_STORED)

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, *exc) -> None:
        self._zip.close()

    def write(self, built, family: str, dtype: str, quant: str | None) -> None:
        """Stores a testing.ep_suite.Built: models as .onnx, the rest pickled."""
        folder = build_dir(family, dtype, quant)
        order = list(built.models)
        for key, model in built.models.items():
            data = ir.serde.serialize_model(model).SerializeToString()
            self._zip.writestr(f"{folder}/{key}.onnx", data)
        rest = dataclasses.replace(built, package=dataclasses.replace(built.package, models={}),
                                   serialized={})
        self._zip.writestr(f"{folder}/{_PICKLE}",
                           pickle.dumps((rest, order), protocol=pickle.HIGHEST_PROTOCOL))

    def write_error(self, family: str, dtype: str, quant: str | None, text: str) -> None:
        """Records a build that raised: its tests fail with ``text``."""
        self._zip.writestr(f"{build_dir(family, dtype, quant)}/{_ERROR}", text)


class Archive:
    """The builds of one archive, read on demand."""

    def __init__(self, path: str) -> None:
        self._zip = zipfile.ZipFile(path)
        self._names = frozenset(self._zip.namelist())

    def holds(self, family: str, dtype: str, quant: str | None) -> bool:
        folder = build_dir(family, dtype, quant)
        return any(f"{folder}/{name}" in self._names for name in (_PICKLE, _ERROR))

    def failed(self, family: str, dtype: str, quant: str | None) -> bool:
        return f"{build_dir(family, dtype, quant)}/{_ERROR}" in self._names

    def read(self, family: str, dtype: str, quant: str | None):
        """The Built that ArchiveWriter.write stored, its models' bytes kept for onnxruntime."""
        folder = build_dir(family, dtype, quant)
        if self.failed(family, dtype, quant):
            text = self._zip.read(f"{folder}/{_ERROR}").decode()
            raise BuildFailed(f"the ep_builds action could not build this:\n{text}")
        rest, order = pickle.loads(self._zip.read(f"{folder}/{_PICKLE}"))
        for key in order:  # Built.models parses them when a test first looks at the graphs
            rest.serialized[key] = self._zip.read(f"{folder}/{key}.onnx")
        return rest


def prebuilt_archives(ep: str) -> list[Archive] | None:
    """The EP's archives of the ``ep_builds`` action's shards in this test's runfiles
    (ep/suite_builds/<shard>/<dir>.zip; each holds some families), else None."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shards = os.path.join(root, "ep", "suite_builds")
    if not os.path.isdir(shards):
        return None
    paths = [os.path.join(shards, shard, ep.replace("-", "_") + SUFFIX)
             for shard in sorted(os.listdir(shards))]
    return [_open(p) for p in paths if os.path.isfile(p)] or None


_OPEN: dict[str, Archive] = {}


def _open(path: str) -> Archive:
    """One Archive per file and process (its member index is read once)."""
    if path not in _OPEN:
        _OPEN[path] = Archive(path)
    return _OPEN[path]


def find(archives: list[Archive], family: str, dtype: str, quant: str | None) -> Archive | None:
    """The archive of whichever shard made the build."""
    return next((a for a in archives if a.holds(family, dtype, quant)), None)


class BuildFailed(RuntimeError):
    """A build that failed inside the ep_builds action, raised where a test asks for it."""
