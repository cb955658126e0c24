"""Prefill latency and memory in onnxruntime-genai by which logits rows the decoder computes.

Three packages of the benchmark model (tools/bench.py's): the peer's (logits
for every prompt position), mobius with ``--prefill-logits all`` and mobius'
default for the genai layout (the last real token only, which genai runs as a
pruned model). Each measurement runs in a fresh process: median time of
``append_tokens`` (one prefill) and the peak RSS growth during the prefills
(over the RSS after loading).

    bazel run //tools:prefill_bench -- --prompt-tokens 2000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time

_TOOLS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _TOOLS_DIR)

from bench import measure, shapes  # noqa: E402  (tools/bench/)


def _bench_cli():
    """tools/bench.py (its package commands), which the tools/bench/ package shadows."""
    spec = importlib.util.spec_from_file_location("bench_cli", os.path.join(_TOOLS_DIR, "bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _bench_cli()

#: (name, extra mobius flags); None: the peer's package
PACKAGES = (("peer", None), ("mobius-all", ["--prefill-logits", "all"]), ("mobius", []))


def measure_prefill(folder: str, prompt_tokens: int, repeat: int) -> dict:
    """One package in this process: genai prefill latency (ms) and RSS growth (MiB)."""
    import numpy as np
    import onnxruntime_genai as og

    model = og.Model(folder)
    ids = np.random.default_rng(0).integers(10, 500, (1, prompt_tokens)).astype(np.int32)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeat + 1):  # the first prefill warms up
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=prompt_tokens + 1, do_sample=False)
        generator = og.Generator(model, params)
        start = time.perf_counter()
        generator.append_tokens(ids)
        times.append(time.perf_counter() - start)
        del generator
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"prefill_ms": round(1000 * statistics.median(times[1:]), 1),
            "rss_growth_mib": round((peak - loaded) / 1024, 1), "peak_rss_mib": round(peak / 1024)}


def _build(workdir: str, checkpoint: str) -> dict[str, str]:
    commands = bench._tool_commands(checkpoint, "", os.path.join(workdir, "peer-cache"))
    folders = {}
    for name, extra in PACKAGES:
        folder = os.path.join(workdir, f"prefill-{name}")
        cmd = list(commands["peer" if extra is None else "mobius"])
        cmd[cmd.index("")] = folder
        if not os.path.isfile(os.path.join(folder, "model.onnx")):
            subprocess.run(cmd + (extra or []), check=True,
                           env=measure.child_env(bench._repo_root()))
        folders[name] = folder
    return folders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prefill_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default=bench._default_workdir())
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure_prefill(args.one, args.prompt_tokens, args.repeat)))
        return 0
    folders = _build(args.workdir, shapes.make_checkpoint(args.workdir))
    results = {}
    for name, folder in folders.items():
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", folder,
                              "--prompt-tokens", str(args.prompt_tokens),
                              "--repeat", str(args.repeat)],
                             check=True, capture_output=True, text=True,
                             env=measure.child_env(bench._repo_root()))
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"prefill_bench: {name}: {results[name]}")
    for name in ("mobius-all", "mobius"):
        ratio = results[name]["prefill_ms"] / results["peer"]["prefill_ms"]
        print(f"prefill_bench: {name} / peer prefill latency: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
