"""A real EP started from a test: sessions and genai runs on a package, in a subprocess.

Each real EP's onnxruntime build (onnxruntime-openvino, onnxruntime-webgpu) is
installed by ./bazelw into a folder of its own, passed to tests in an environment
variable, so the onnxruntime the CPU tests import stays the pinned one; the worker
(testing/ep_worker.py) imports that build instead. A backend that cannot start raises
with what went wrong: never a skip. testing/openvino_backend.py and
testing/webgpu_backend.py say where each comes from.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Callable

import numpy as np
import onnx_ir as ir

from mobius.ep.registry import get_ep

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORKER = os.path.join(_ROOT, "testing", "ep_worker.py")


@dataclasses.dataclass
class Run:
    """What one run on the EP gave: outputs (or tokens) and where each node ran."""

    provider: str
    outputs: dict
    tokens: list | None
    placement: list  # [provider, op, node name] per executed node
    error: str | None = None  # the worker's traceback where the EP could not run the model

    def elsewhere(self) -> list[str]:
        """"op" of every executed node another provider ran, sorted (the pinned list)."""
        return sorted(op for provider, op, _ in self.placement if provider != self.provider)

    def on_ep(self) -> int:
        """Nodes (or, for a compiling EP, fused subgraphs) the EP ran."""
        return sum(provider == self.provider for provider, _, _ in self.placement)

    def summary(self) -> str:
        """One line for failure messages: nodes on the EP and the ops elsewhere."""
        return (f"{self.on_ep()} node(s) on {self.provider}; elsewhere: "
                f"{dict(Counter(self.elsewhere())) or 'none'}")


@dataclasses.dataclass
class Job:
    """One model to run on the EP: its path, feeds, and the build's dtype and quantization."""

    model_path: str
    feeds: dict
    dtype: ir.DataType
    quantized: bool


@dataclasses.dataclass(frozen=True)
class Backend:
    """One real EP: its mobius name, onnxruntime provider, and how its worker starts."""

    ep: str
    provider: str
    site_variable: str  # names the folder ./bazelw installed the EP's onnxruntime into
    python_dir: Callable[[str], str]  # site folder -> the folder to put on PYTHONPATH
    worker_env: Callable[[str], dict[str, str]] = lambda site: {}  # drivers, for the worker only
    #: the package of an EP plugin library for the pinned onnxruntime (its
    #: get_library_path()), which the worker registers; None for an onnxruntime build
    plugin: str | None = None

    def site(self) -> str:
        folder = os.environ.get(self.site_variable)
        package = self.plugin or "onnxruntime"
        if not folder or not os.path.isdir(os.path.join(self.python_dir(folder), package)):
            raise RuntimeError(
                f"the {self.ep} backend is not installed: ${self.site_variable} ({folder!r}) "
                f"holds no {package}; run the tests through ./bazelw, which installs it")
        return folder

    def provider_options(self, dtype: ir.DataType, quantized: bool) -> dict[str, str]:
        """The options a package's genai_config gives the EP (EpCapabilities.provider_options_for)."""
        (options,) = get_ep(self.ep).provider_options_for(dtype, quantized).values()
        return dict(options)

    def run_sessions(self, jobs: list[Job]) -> list[Run]:
        """Runs each job's model once on the EP, all in one worker process; CPU fallback
        allowed and recorded. A model the EP could not run gives a Run with its error."""
        folder = tempfile.mkdtemp(prefix="feeds-", dir=os.environ.get("TEST_TMPDIR"))
        requests = []
        for i, job in enumerate(jobs):
            feeds = os.path.join(folder, f"{i}.npz")
            np.savez(feeds, **job.feeds)
            requests.append({"model": job.model_path, "feeds": feeds, "provider_options":
                             self.provider_options(job.dtype, job.quantized)})
        result = self._call("sessions", {"jobs": requests})
        runs = []
        for i, run in enumerate(result["runs"]):
            if "error" in run:
                error = f"{run['error']}the worker's log:\n{result['stderr']}"
                runs.append(Run(self.provider, {}, None, [], error=error))
                continue
            with np.load(os.path.join(result["out"], f"{i}-outputs.npz")) as data:
                runs.append(Run(self.provider, dict(data), None, run["placement"]))
        return runs

    def static_greedy(self, model_path: str, prompt: list, max_new_tokens: int, dtype: ir.DataType,
                      quantized: bool = False) -> Run:
        """Greedy tokens of a static-shape decoder on the EP, driven through onnxruntime
        (testing/static_decoder.py: chunked prefill, sliding cache)."""
        result = self._call("static_greedy", {
            "model": model_path, "prompt": prompt, "max_new_tokens": max_new_tokens,
            "provider_options": self.provider_options(dtype, quantized)})
        return Run(self.provider, {}, result["tokens"], result["placement"])

    def generate(self, package_dir: str, prompts: list, max_new_tokens: int) -> Run:
        """Greedy tokens from onnxruntime-genai on the EP (the package's own provider options)."""
        result = self._call("genai", {"package": package_dir, "prompts": prompts,
                                      "max_new_tokens": max_new_tokens})
        return Run(self.provider, {}, result["tokens"], result["placement"])

    def _call(self, mode: str, request: dict) -> dict:
        site = self.site()
        out = tempfile.mkdtemp(prefix=f"{self.ep}-", dir=os.environ.get("TEST_TMPDIR"))
        request = {**request, "out": out, "provider": self.provider, "plugin": self.plugin}
        path = os.path.join(out, "request.json")
        with open(path, "w") as f:
            json.dump(request, f)
        env = {**os.environ, **self.worker_env(site),
               "PYTHONPATH": os.pathsep.join([self.python_dir(site), _ROOT])}
        done = subprocess.run([sys.executable, _WORKER, mode, path], env=env,
                              capture_output=True, text=True, timeout=600)
        if done.returncode:
            what = request.get("package") or f"{len(request['jobs'])} model(s)"
            raise RuntimeError(f"the {self.ep} EP failed ({mode}, {what}):\n{done.stderr[-4000:]}")
        with open(os.path.join(out, "result.json")) as f:
            result = json.load(f)
        result["out"] = out
        result["stderr"] = done.stderr[-4000:]
        return result
