"""Runs a package on a real EP's own onnxruntime build; started by testing/<ep>_backend.py.

This process imports the onnxruntime put first on PYTHONPATH by the caller (an EP's
own build: onnxruntime-openvino, onnxruntime-webgpu), which cannot share a process
with the onnxruntime the CPU tests use. Usage:
    ep_worker.py sessions REQUEST.json  outputs + node placement of each job -> request["out"]
    ep_worker.py genai REQUEST.json     greedy tokens + node placement
    ep_worker.py static_greedy REQUEST.json  a static-shape decoder's greedy tokens through
                                        onnxruntime (testing/static_decoder.py) + placement
The request names the EP's provider ("provider") and, for an EP plugin library on this
onnxruntime (onnxruntime-qnn), the package that ships it ("plugin"), registered here
with ort.register_execution_provider_library; a session that comes up without it
(onnxruntime drops an EP whose device fails to start, e.g. WebGPU with no Vulkan
driver) is an error, not a quiet run on the CPU EP. Placement comes from onnxruntime's
profile: one "kernel_time" event per node run, naming its provider (an OpenVINO
subgraph is one node, "OpenVINO-EP-subgraph_<n>").
"""

from __future__ import annotations

import glob
import importlib
import json
import os
import sys
import traceback

import numpy as np


def _placement(profile: str) -> list[list[str]]:
    """[provider, op, node name] of every node the profiled run executed, each once."""
    with open(profile) as f:
        events = json.load(f)
    seen = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            args = event["args"]
            seen[event["name"][:-len("_kernel_time")]] = [args["provider"], args["op_name"]]
    return [[provider, op, name] for name, (provider, op) in sorted(seen.items())]


def _provider(request: dict):
    """onnxruntime, and how a session takes the EP: ``add(options, provider_options)``."""
    import onnxruntime as ort

    provider, plugin = request["provider"], request.get("plugin")
    if plugin:
        library = importlib.import_module(plugin).get_library_path()
        ort.register_execution_provider_library(provider, library)
        devices = [d for d in ort.get_ep_devices() if d.ep_name == provider]
        if not devices:
            raise RuntimeError(f"{library} registered but offers no {provider} device")
        return ort, lambda options, provider_options: options.add_provider_for_devices(
            devices, provider_options)
    if provider not in ort.get_available_providers():
        raise RuntimeError(f"onnxruntime {ort.__version__} at {ort.__file__} has no {provider}")
    return ort, None


def _sessions(request: dict) -> dict:
    """Each job of ``request["jobs"]`` once: its outputs to outputs-<i>.npz, and its node
    placement or, for a model the EP could not run, the error (one process for all: the
    EP's device starts once)."""
    ort, add = _provider(request)
    runs = []
    for i, job in enumerate(request["jobs"]):
        try:
            session = _session(ort, add, request["provider"], job,
                               os.path.join(request["out"], str(i)))
            outputs = session.run(None, dict(np.load(job["feeds"])))
            np.savez(os.path.join(request["out"], f"{i}-outputs.npz"),
                     **{o.name: v for o, v in zip(session.get_outputs(), outputs)})
            runs.append({"placement": _placement(session.end_profiling())})
        except Exception:  # this job's test fails with it; the others still run
            runs.append({"error": traceback.format_exc()})
    return {"runs": runs, "version": ort.__version__}


def _session(ort, add, provider: str, job: dict, profile: str):
    """A profiled session of ``job["model"]`` on the EP (an error if the EP did not start)."""
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = profile + "-profile"
    if add:
        add(options, job["provider_options"])
        session = ort.InferenceSession(job["model"], options)
    else:
        session = ort.InferenceSession(job["model"], options,
                                       providers=[(provider, job["provider_options"])])
    if provider not in session.get_providers():
        raise RuntimeError(f"{provider} did not start (the session has only "
                           f"{session.get_providers()}); see onnxruntime's messages")
    return session


def _static_greedy(request: dict) -> dict:
    from testing.static_decoder import greedy

    ort, add = _provider(request)
    session = _session(ort, add, request["provider"], request,
                       os.path.join(request["out"], "static"))
    names = [o.name for o in session.get_outputs()]
    tokens = greedy(lambda feeds: dict(zip(names, session.run(None, feeds))),
                    session.get_inputs(), request["prompt"], request["max_new_tokens"])
    return {"tokens": tokens, "placement": _placement(session.end_profiling())}


def _genai(request: dict) -> dict:
    from testing.genai_harness import genai_generate

    prefix = os.path.join(request["out"], "genai")
    overlay = {"model": {"decoder": {"session_options": {"enable_profiling": prefix}}}}
    tokens = genai_generate(request["package"], request["prompts"], request["max_new_tokens"],
                            config_overlay=overlay)
    (profile,) = glob.glob(prefix + "*.json")
    return {"tokens": tokens, "placement": _placement(profile)}


def main() -> None:
    mode, path = sys.argv[1:3]
    with open(path) as f:
        request = json.load(f)
    result = {"sessions": _sessions, "genai": _genai, "static_greedy": _static_greedy}[mode](request)
    with open(os.path.join(request["out"], "result.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
