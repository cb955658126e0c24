"""The L1 build matrix the vision-language family tests share: every built-in EP x
every dtype it accepts, an EP that does not serve the task rejecting it up front,
and the three saved models (vision, embedding, model) through the full ONNX checker.
What each family asserts about the graphs and genai_config stays in its own test."""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import onnx
import pytest

from mobius.builder import build
from mobius.ep.registry import ep_registry
from mobius.errors import MobiusError
from mobius.weights.dtypes import SHORT_NAMES

MATRIX = [(caps.name, SHORT_NAMES[dtype]) for caps in ep_registry
          for dtype in sorted(caps.dtypes, key=lambda d: SHORT_NAMES[d])]

#: ``@every_ep_and_dtype`` parametrizes a test over (ep, dtype) for the whole MATRIX.
every_ep_and_dtype = pytest.mark.parametrize("ep,dtype", MATRIX,
                                             ids=[f"{e}-{d}" for e, d in MATRIX])


def rejection(family, checkpoint: str, ep: str, dtype: str) -> str | None:
    """The error message of an EP that rejects the family's task up front (the build
    must raise a MobiusError naming the task); None where the EP serves the task."""
    caps = ep_registry.get(ep)
    if caps.tasks is None or family.task.name in caps.tasks:
        return None
    with pytest.raises(MobiusError, match=family.task.name) as info:
        build(checkpoint, execution_provider=ep, dtype=dtype)
    return str(info.value)


@dataclasses.dataclass
class Saved:
    """A built and saved three-model package; ``graphs`` are loaded without weights."""

    package: object  # mobius ModelPackage
    path: str
    graphs: dict  # "vision" / "embedding" / "model" -> onnx.GraphProto

    @functools.cached_property
    def genai_model(self) -> dict:
        """genai_config.json's "model" section."""
        with open(os.path.join(self.path, "genai_config.json")) as f:
            return json.load(f)["model"]

    @functools.cached_property
    def processor(self) -> dict:
        """The "processor" section of the file genai_config's vision section names."""
        with open(os.path.join(self.path, self.genai_model["vision"]["config_filename"])) as f:
            return json.load(f)["processor"]


def build_checked(checkpoint: str, ep: str, dtype: str, folder) -> Saved:
    """Build and save under ``folder``; every model passes the full ONNX checker."""
    package = build(checkpoint, execution_provider=ep, dtype=dtype)
    path = package.save(os.path.join(str(folder), "pkg"))
    graphs = {}
    for key in ("vision", "embedding", "model"):
        file = os.path.join(path, package.filename(key))
        onnx.checker.check_model(file, full_check=True)
        graphs[key] = onnx.load(file, load_external_data=False).graph
    return Saved(package, path, graphs)
