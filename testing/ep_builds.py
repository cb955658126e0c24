"""The stored form of the EP suites' builds, as the ``ep_builds`` actions
(testing/write_ep_builds.py) write them and testing/ep_suite.Builds reads them.

Each build lives in ``<root>/<family>/<dtype>[-<quant>]/``, a root per EP and shard: its
models as self-contained ``<key>.onnx`` files and the rest of the result (package
metadata, config, warnings) as ``built.pickle``; or ``error.txt``, the traceback of a
build that raised, so that only the tests of that build fail, with the build's own
message. The EP's fusion (L2), parity (L3) and golden (L5) targets load what was built
once instead of building it three times, and hand the stored bytes straight to
onnxruntime. Outside Bazel there is no such folder (:func:`prebuilt_dirs` is None) and
the suites build in-process."""

from __future__ import annotations

import dataclasses
import os
import pickle

import onnx_ir as ir

_PICKLE = "built.pickle"
ERROR = "error.txt"


def build_dir(root: str, family: str, dtype: str, quant: str | None) -> str:
    return os.path.join(root, family, f"{dtype}-{quant}" if quant else dtype)


def prebuilt_dirs(ep: str) -> list[str] | None:
    """The EP's folders of the ``ep_builds`` action's shards in this test's runfiles
    (ep/suite_builds/<shard>/<dir>; each holds some families), else None."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shards = os.path.join(root, "ep", "suite_builds")
    if not os.path.isdir(shards):
        return None
    folders = [os.path.join(shards, shard, ep.replace("-", "_"))
               for shard in sorted(os.listdir(shards))]
    return [f for f in folders if os.path.isdir(f)] or None


def find(roots: list[str], family: str, dtype: str, quant: str | None) -> str | None:
    """The folder of one build in whichever shard made it."""
    for root in roots:
        folder = build_dir(root, family, dtype, quant)
        if os.path.isdir(folder):
            return folder
    return None


def write(built, folder: str) -> None:
    """Stores a testing.ep_suite.Built: models as .onnx, the rest pickled."""
    os.makedirs(folder)
    order = list(built.models)
    for key, model in built.models.items():
        ir.save(model, os.path.join(folder, f"{key}.onnx"))
    rest = dataclasses.replace(built, package=dataclasses.replace(built.package, models={}),
                               serialized={})
    with open(os.path.join(folder, _PICKLE), "wb") as f:
        pickle.dump((rest, order), f, protocol=pickle.HIGHEST_PROTOCOL)


def read(folder: str):
    """The Built that :func:`write` stored, its models' file bytes kept for onnxruntime."""
    error = os.path.join(folder, ERROR)
    if os.path.exists(error):
        with open(error) as f:
            raise BuildFailed(f"the ep_builds action could not build this:\n{f.read()}")
    with open(os.path.join(folder, _PICKLE), "rb") as f:
        rest, order = pickle.load(f)
    for key in order:  # Built.models parses them when a test first looks at the graphs
        with open(os.path.join(folder, f"{key}.onnx"), "rb") as f:
            rest.serialized[key] = f.read()
    return rest


class BuildFailed(RuntimeError):
    """A build that failed inside the ep_builds action, raised where a test asks for it."""
