"""Runs a package on a real EP's own onnxruntime build; started by testing/<ep>_backend.py.

This process imports the onnxruntime put first on PYTHONPATH by the caller (an EP's
own build: onnxruntime-openvino, onnxruntime-webgpu), which cannot share a process
with the onnxruntime the CPU tests use. Usage:
    ep_worker.py sessions REQUEST.json  outputs + node placement of each job -> request["out"]
    ep_worker.py genai REQUEST.json     greedy tokens + node placement
The request names the EP's provider ("provider"); a session that comes up without it
(onnxruntime drops an EP whose device fails to start, e.g. WebGPU with no Vulkan
driver) is an error, not a quiet run on the CPU EP. Placement comes from onnxruntime's
profile: one "kernel_time" event per node run, naming its provider (an OpenVINO
subgraph is one node, "OpenVINO-EP-subgraph_<n>").
"""

from __future__ import annotations

import glob
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


def _sessions(request: dict) -> dict:
    """Each job of ``request["jobs"]`` once: its outputs to outputs-<i>.npz, and its node
    placement or, for a model the EP could not run, the error (one process for all: the
    EP's device starts once)."""
    import onnxruntime as ort

    provider = request["provider"]
    if provider not in ort.get_available_providers():
        raise RuntimeError(f"onnxruntime {ort.__version__} at {ort.__file__} has no {provider}")
    runs = []
    for i, job in enumerate(request["jobs"]):
        try:
            runs.append({"placement": _run(ort, provider, job, os.path.join(request["out"], str(i)))})
        except Exception:  # this job's test fails with it; the others still run
            runs.append({"error": traceback.format_exc()})
    return {"runs": runs, "version": ort.__version__}


def _run(ort, provider: str, job: dict, out: str) -> list[list[str]]:
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = out + "-profile"
    session = ort.InferenceSession(job["model"], options,
                                   providers=[(provider, job["provider_options"])])
    if provider not in session.get_providers():
        raise RuntimeError(f"{provider} did not start (the session has only "
                           f"{session.get_providers()}); see onnxruntime's messages")
    outputs = session.run(None, dict(np.load(job["feeds"])))
    np.savez(out + "-outputs.npz", **{o.name: v for o, v in zip(session.get_outputs(), outputs)})
    return _placement(session.end_profiling())


def _genai(request: dict) -> dict:
    from testing.genai_harness import genai_generate

    prefix = os.path.join(request["out"], "genai")
    overlay = {"model": {"decoder": {"session_options": {"enable_profiling": prefix}}}}
    tokens = genai_generate(request["package"], request["prompts"], request["max_new_tokens"],
                            config_overlay=overlay, intra_op_num_threads=1)
    (profile,) = glob.glob(prefix + "*.json")
    return {"tokens": tokens, "placement": _placement(profile)}


def main() -> None:
    mode, path = sys.argv[1:3]
    with open(path) as f:
        request = json.load(f)
    result = {"sessions": _sessions, "genai": _genai}[mode](request)
    with open(os.path.join(request["out"], "result.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
