"""Prefill with and without ``num_logits_to_keep`` on the benchmark model (tools/bench.py's).

onnxruntime-genai 0.18 cannot run a package with that input (it binds
[batch, sequence, vocab] logits), so this times one prefill call of plain
onnxruntime on the CPU for: the peer's package (all logits), mobius' package
(all logits) and mobius' package with ``--logits-to-keep`` (k=1). Each
measurement runs in a fresh process: median prefill latency and the peak RSS
growth during the prefill calls (over the RSS after loading).

    bazel run //tools:prefill_bench -- --prompt-tokens 2000
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools import bench  # noqa: E402


def measure(folder: str, prompt_tokens: int, repeat: int, keep: int | None) -> dict:
    """One package in this process: prefill latency (ms) and RSS growth (MiB)."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(os.path.join(folder, "model.onnx"), options,
                                   providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    ids = np.random.default_rng(0).integers(10, 500, (1, prompt_tokens)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             "position_ids": np.arange(prompt_tokens, dtype=np.int64)[None]}
    for name, info in inputs.items():
        if name.startswith("past_key_values"):
            dims = [d if isinstance(d, int) else 0 for d in info.shape]
            dims[0], dims[3] = 1, bench.LLAMA_200M["head_dim"]  # the peer names it kv_cache_dim
            feeds[name] = np.zeros(dims, np.float32)
    if keep is not None:
        feeds["num_logits_to_keep"] = np.array(keep, np.int64)
    feeds = {k: v for k, v in feeds.items() if k in inputs}
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeat + 1):  # the first call warms up
        start = time.perf_counter()
        logits = session.run(["logits"], feeds)[0]
        times.append(time.perf_counter() - start)
        del logits
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"prefill_ms": round(1000 * statistics.median(times[1:]), 1),
            "rss_growth_mib": round((peak - loaded) / 1024, 1), "peak_rss_mib": round(peak / 1024)}


def _build(workdir: str, checkpoint: str) -> dict[str, str]:
    commands = bench._tool_commands(checkpoint, "", os.path.join(workdir, "peer-cache"))
    folders = {}
    for name, extra in (("peer", None), ("mobius", []), ("mobius-keep", ["--logits-to-keep"])):
        folder = os.path.join(workdir, f"prefill-{name}")
        cmd = list(commands["peer" if name == "peer" else "mobius"])
        cmd[cmd.index("")] = folder
        if not os.path.isfile(os.path.join(folder, "model.onnx")):
            subprocess.run(cmd + (extra or []), check=True, env=bench._child_env(bench._repo_root()))
        folders[name] = folder
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prefill_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=bench._default_workdir())
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", nargs=2, metavar=("FOLDER", "KEEP"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        keep = None if args.one[1] == "-" else int(args.one[1])
        print(json.dumps(measure(args.one[0], args.prompt_tokens, args.repeat, keep)))
        return 0
    folders = _build(args.workdir, bench.make_checkpoint(args.workdir))
    results = {}
    for name, folder in folders.items():
        keep = "1" if name == "mobius-keep" else "-"
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", folder, keep,
                              "--prompt-tokens", str(args.prompt_tokens),
                              "--repeat", str(args.repeat)],
                             check=True, capture_output=True, text=True,
                             env=bench._child_env(bench._repo_root()))
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"prefill_bench: {name}: {results[name]}")
    ratio = results["mobius-keep"]["prefill_ms"] / results["peer"]["prefill_ms"]
    print(f"prefill_bench: mobius --logits-to-keep / peer prefill latency: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
