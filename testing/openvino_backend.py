"""The OpenVINO EP, started from a test: sessions and genai runs on a package, in a subprocess.

onnxruntime-openvino (its own onnxruntime build with the OpenVINO EP) is installed
by ./bazelw into a folder of its own (requirements-openvino.txt), passed to tests as
$MOBIUS_OPENVINO_SITE, so the onnxruntime the CPU tests import stays the pinned one.
Why not the plugin wheel onnxruntime-ep-openvino on the pinned onnxruntime: its EP
factory offers devices only of Intel's vendor id (0x8086), and this CPU is AMD, so
``ort.get_ep_devices()`` lists no OpenVINO device here (docs/eps.md, "OpenVINO").
A backend that cannot start raises with what went wrong: never a skip.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

import numpy as np
import onnx_ir as ir

from mobius.ep.registry import get_ep

EP = "openvino"
PROVIDER = "OpenVINOExecutionProvider"
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_WORKER = os.path.join(_ROOT, "testing", "openvino_worker.py")


@dataclasses.dataclass
class Run:
    """What one run on the EP gave: outputs (or tokens) and where each node ran."""

    outputs: dict
    tokens: list | None
    placement: list  # [provider, op, node name] per executed node

    def not_on_openvino(self) -> list[str]:
        """"op" of every executed node another provider ran, sorted (the pinned list)."""
        return sorted(op for provider, op, _ in self.placement if provider != PROVIDER)

    def openvino_subgraphs(self) -> int:
        return sum(provider == PROVIDER for provider, _, _ in self.placement)


def site() -> str:
    folder = os.environ.get("MOBIUS_OPENVINO_SITE")
    if not folder or not os.path.isdir(os.path.join(folder, "onnxruntime")):
        raise RuntimeError(
            "the OpenVINO backend is not installed: $MOBIUS_OPENVINO_SITE "
            f"({folder!r}) holds no onnxruntime-openvino; run the tests through ./bazelw, "
            "which installs requirements-openvino.txt there")
    return folder


def provider_options(dtype: ir.DataType, quantized: bool) -> dict[str, str]:
    """The options a package's genai_config gives the EP (EpCapabilities.provider_options_for)."""
    (options,) = get_ep(EP).provider_options_for(dtype, quantized).values()
    return dict(options)


def _call(mode: str, request: dict) -> dict:
    out = tempfile.mkdtemp(prefix="openvino-", dir=os.environ.get("TEST_TMPDIR"))
    request = {**request, "out": out}
    path = os.path.join(out, "request.json")
    with open(path, "w") as f:
        json.dump(request, f)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site(), _ROOT])}
    done = subprocess.run([sys.executable, _WORKER, mode, path], env=env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"the OpenVINO EP failed ({mode}, {request.get('model') or request.get('package')}):"
                           f"\n{done.stderr[-4000:]}")
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    result["out"] = out
    return result


def run_session(model_path: str, feeds: dict, dtype: ir.DataType, quantized: bool) -> Run:
    """Runs ``model_path`` once on the EP with ``feeds``; CPU fallback allowed and recorded."""
    folder = tempfile.mkdtemp(prefix="feeds-", dir=os.environ.get("TEST_TMPDIR"))
    np.savez(os.path.join(folder, "feeds.npz"), **feeds)
    result = _call("session", {"model": model_path, "feeds": os.path.join(folder, "feeds.npz"),
                               "provider_options": provider_options(dtype, quantized)})
    with np.load(os.path.join(result["out"], "outputs.npz")) as data:
        outputs = dict(data)
    return Run(outputs, None, result["placement"])


def generate(package_dir: str, prompts: list, max_new_tokens: int) -> Run:
    """Greedy tokens from onnxruntime-genai on the EP (the package's own provider options)."""
    result = _call("genai", {"package": package_dir, "prompts": prompts,
                             "max_new_tokens": max_new_tokens})
    return Run({}, result["tokens"], result["placement"])


def summary(run: Run) -> str:
    """One line for failure messages: subgraphs on the EP and the ops elsewhere."""
    return (f"{run.openvino_subgraphs()} OpenVINO subgraph(s); elsewhere: "
            f"{dict(Counter(run.not_on_openvino())) or 'none'}")
