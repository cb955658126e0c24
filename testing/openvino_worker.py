"""Runs a package on onnxruntime-openvino's OpenVINO EP; started by testing/openvino_backend.py.

This process imports the onnxruntime of $MOBIUS_OPENVINO_SITE (onnxruntime-openvino,
put first on PYTHONPATH by the caller), which cannot share a process with the
onnxruntime the CPU tests use. Usage:
    openvino_worker.py session REQUEST.json   logits + node placement -> request["out"]
    openvino_worker.py genai REQUEST.json     greedy tokens + node placement
Placement comes from onnxruntime's profile: one "kernel_time" event per node run,
naming its provider (an OpenVINO subgraph is one node, "OpenVINO-EP-subgraph_<n>").
"""

from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np

PROVIDER = "OpenVINOExecutionProvider"


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


def _session(request: dict) -> dict:
    import onnxruntime as ort

    if PROVIDER not in ort.get_available_providers():
        raise RuntimeError(f"onnxruntime {ort.__version__} at {ort.__file__} has no {PROVIDER}")
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(request["out"], "profile")
    session = ort.InferenceSession(request["model"], options,
                                   providers=[(PROVIDER, request["provider_options"])])
    feeds = dict(np.load(request["feeds"]))
    outputs = session.run(None, feeds)
    np.savez(os.path.join(request["out"], "outputs.npz"),
             **{o.name: v for o, v in zip(session.get_outputs(), outputs)})
    return {"placement": _placement(session.end_profiling()), "version": ort.__version__}


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
    result = {"session": _session, "genai": _genai}[mode](request)
    with open(os.path.join(request["out"], "result.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
