"""mobius benchmarks against onnxruntime-genai's model builder (the peer).

    ./bazelw run //tools:bench -- build [--repeat 3] [--workdir DIR] [--json FILE]
    ./bazelw run //tools:bench -- run   [--mobius PKG --peer PKG] [--json FILE]
    python3 tools/bench.py build ...                     (same, without Bazel)

``build``: generates (once, cached under --workdir) a Llama-shaped random
checkpoint of ~200M parameters (hidden 1024, intermediate 2816, 12 layers,
16 heads, 4 KV heads, vocab 32000, untied lm_head; float32, 5 safetensors
shards + index, config.json, generation_config.json, a small BPE tokenizer),
then measures side by side, each in its own subprocess:

* ``mobius``: ``python3 -m mobius build --model CKPT OUT --dtype f32 --ep cpu --quiet``
* ``peer``:   ``python3 -m onnxruntime_genai.models.builder -i CKPT -o OUT -p fp32 -e cpu``
* ``copy``:   ``shutil.copytree(CKPT, OUT)``, the floor (pure I/O)

recording wall time, CPU time and the peak RSS of the whole process tree
(sampled every ~20 ms, summed over the process and all its descendants, and
never below one process's own VmHWM high-water mark). Each measurement is
repeated --repeat times and the median reported. Both packages are then loaded
in onnxruntime (one InferenceSession each) so a broken build never produces a
number.

``run``: generation speed with onnxruntime-genai on CPU, mobius package vs
peer package (built by ``build`` into --workdir unless given): prefill latency
of a --prompt-tokens prompt (128) and decode tokens/s over --decode-tokens (64)
greedy steps, plus the ONNX graph's node count per decoder layer.

This is a benchmark, not a test: nothing here runs under ``bazel test``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

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


def _out_root(workdir: str, quant: str | None) -> str:
    return os.path.join(workdir, f"out-{quant}" if quant else "out")


def _default_workdir() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "mobius", "bench")


# --------------------------------------------------------------------------- checkpoint

CHECKPOINT_VERSION = 1  # bump when the shape, dtype or layout below changes

LLAMA_200M = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 12,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "torch_dtype": "float32",
    "transformers_version": "4.46.0",
}
NUM_SHARDS = 5


def checkpoint_tensors(config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor of a LlamaForCausalLM, in transformers' order."""
    h = config["hidden_size"]
    i = config["intermediate_size"]
    d = config.get("head_dim") or h // config["num_attention_heads"]
    q = config["num_attention_heads"] * d
    kv = config["num_key_value_heads"] * d
    v = config["vocab_size"]
    tensors = [("model.embed_tokens.weight", (v, h))]
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        tensors += [
            (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)),
            (p + "mlp.gate_proj.weight", (i, h)),
            (p + "mlp.up_proj.weight", (i, h)),
            (p + "mlp.down_proj.weight", (h, i)),
            (p + "input_layernorm.weight", (h,)),
            (p + "post_attention_layernorm.weight", (h,)),
        ]
    tensors += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return tensors


def parameter_count(config: dict) -> int:
    count = 0
    for _, shape in checkpoint_tensors(config):
        n = 1
        for dim in shape:
            n *= dim
        count += n
    return count


def _random_tensor(seed: int, index: int, name: str, shape: tuple[int, ...]):
    import numpy as np

    rng = np.random.default_rng([seed, index])
    data = rng.standard_normal(shape, dtype=np.float32)
    if name.endswith("norm.weight"):
        data *= 0.1
        data += 1.0
    else:
        data *= 0.02
    return data


def make_checkpoint(workdir: str, seed: int = 0, log=print) -> str:
    """Returns the cached benchmark checkpoint folder, writing it first if needed.

    Written with numpy only, one shard (~1/5 of the weights) in memory at a
    time, into a staging folder renamed into place when complete.
    """
    folder = os.path.join(workdir, f"llama-200m-f32-v{CHECKPOINT_VERSION}-seed{seed}")
    if os.path.isfile(os.path.join(folder, "model.safetensors.index.json")):
        return folder
    _import_mobius(_repo_root())
    from mobius.tiny.tokenizer import write_tiny_tokenizer
    from mobius.weights.safetensors_writer import write_sharded

    os.makedirs(workdir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".llama-200m-", dir=workdir)
    config = dict(LLAMA_200M)
    log(f"bench: writing a {parameter_count(config) / 1e6:.0f}M-parameter checkpoint to {folder}")
    start = time.perf_counter()
    try:
        with open(os.path.join(staging, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        with open(os.path.join(staging, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": config["bos_token_id"],
                       "eos_token_id": config["eos_token_id"],
                       "pad_token_id": config["pad_token_id"],
                       "do_sample": False, "transformers_version": "4.46.0"}, f, indent=2)
        lazy = [
            (name, (lambda i=i, name=name, shape=shape: _random_tensor(seed, i, name, shape)))
            for i, (name, shape) in enumerate(checkpoint_tensors(config))
        ]
        write_sharded(staging, lazy, NUM_SHARDS)
        # The tokenizer's vocabulary (600 BPE tokens) is smaller than the
        # model's 32000 rows, as in many real checkpoints that pad the
        # embedding; neither builder nor onnxruntime-genai minds.
        write_tiny_tokenizer(staging, config["vocab_size"])
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log(f"bench: checkpoint written in {time.perf_counter() - start:.1f} s")
    return folder


def _folder_bytes(folder: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            total += os.path.getsize(os.path.join(dirpath, name))
    return total


def _warm_page_cache(folder: str) -> None:
    """Reads every file once so no tool pays for the cold first read."""
    for dirpath, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                while f.read(16 << 20):
                    pass


# --------------------------------------------------------------------------- measuring


class Measurement:
    def __init__(self, wall_s: float, cpu_s: float, peak_rss: int, peak_single: int,
                 processes: int):
        self.wall_s = wall_s
        self.cpu_s = cpu_s  # user + system seconds of the child and its reaped descendants
        self.peak_rss = peak_rss  # bytes: the process tree's peak (see measure())
        self.peak_single = peak_single  # bytes: the largest one process's own VmHWM
        self.processes = processes  # most processes seen at once in the tree


def _proc_rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of one process in bytes, from /proc; (0, 0) once it is gone."""
    rss = hwm = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith(b"VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return rss, hwm


def measure(cmd: list[str], *, env: dict, log_path: str, cwd: str | None = None,
            interval: float = 0.02) -> Measurement:
    """Runs ``cmd``; returns its wall time, CPU time and the peak RSS of its process tree.

    Every ``interval`` seconds the RSS of the child and of all its descendants
    (so worker processes count) is read and summed; the peak is the largest
    such sum, or the largest single process's own high-water mark (VmHWM,
    which also catches a spike that fell between two samples) if that is
    larger. The kernel's ru_maxrss of the child is not used: a child started
    by fork/vfork inherits the high-water mark of this (parent) process.
    """
    import psutil

    with open(log_path, "wb") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        root = psutil.Process(proc.pid)
        peak_sum = peak_single = 0
        most = 1
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            try:
                pids = [proc.pid] + [c.pid for c in root.children(recursive=True)]
            except psutil.NoSuchProcess:
                pids = [proc.pid]
            total = 0
            for p in pids:
                rss, hwm = _proc_rss(p)
                total += rss
                # Popen returns only after the child has exec'd, so its VmHWM is
                # its own (exec starts a fresh address space).
                peak_single = max(peak_single, hwm)
            peak_sum = max(peak_sum, total)
            most = max(most, len(pids))
            time.sleep(interval)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        with open(log_path, "rb") as f:
            tail = f.read()[-4000:].decode(errors="replace")
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n{tail}")
    cpu = rusage.ru_utime + rusage.ru_stime
    return Measurement(wall, cpu, max(peak_sum, peak_single), peak_single, most)


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


def _child_env(root: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # Everything is local: never let either tool reach for the hub.
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def verify_package(folder: str) -> dict:
    """Creates one onnxruntime InferenceSession on the package's model.onnx."""
    import onnxruntime as ort

    path = os.path.join(folder, "model.onnx")
    if not os.path.isfile(path):
        raise RuntimeError(f"{folder} has no model.onnx")
    if not os.path.isfile(os.path.join(folder, "genai_config.json")):
        raise RuntimeError(f"{folder} has no genai_config.json")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    start = time.perf_counter()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    load_s = time.perf_counter() - start
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    if "input_ids" not in inputs or "logits" not in outputs:
        raise RuntimeError(f"{path}: unexpected inputs {inputs} / outputs {outputs}")
    return {"inputs": len(inputs), "outputs": len(outputs), "session_s": round(load_s, 2),
            "package_bytes": _folder_bytes(folder)}


def _median(values):
    return statistics.median(values)


def _mib(n: float) -> float:
    return n / (1024 * 1024)


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import psutil

        mem = f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
    except ImportError:
        mem = "? RAM"
    return f"{os.cpu_count()} cores ({cpu}), {mem}, {platform.system()} {platform.release()}"


def _git_commit(root: str) -> str | None:
    """HEAD of the benchmarked tree, with "+dirty" when it has local changes."""
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no",
                                "--", "mobius"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty.strip() else "")


def versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("onnxruntime", "onnxruntime-genai", "onnx-ir", "onnxscript", "onnx", "torch",
                 "transformers", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def cmd_build(args) -> int:
    root = _repo_root()
    workdir = os.path.abspath(os.path.expanduser(args.workdir))
    checkpoint = make_checkpoint(workdir, seed=args.seed)
    out_root = _out_root(workdir, args.quant)
    os.makedirs(out_root, exist_ok=True)
    env = _child_env(root)
    _warm_page_cache(checkpoint)
    load_before = os.getloadavg()
    if load_before[0] > 0.5 * (os.cpu_count() or 1):
        print(f"bench: warning: load average {load_before[0]:.2f} on {os.cpu_count()} cores; "
              "other work on this machine will inflate wall times (compare CPU s too)",
              file=sys.stderr)
    tools = [t for t in ("copy", "mobius", "peer") if t in args.tools]
    runs: dict[str, list[Measurement]] = {t: [] for t in tools}
    for rep in range(args.repeat):
        for tool in tools:
            out_dir = os.path.join(out_root, tool)
            cache_dir = os.path.join(out_root, "peer-cache")
            for path in (out_dir, cache_dir):
                shutil.rmtree(path, ignore_errors=True)
            # Flush the previous run's dirty pages so its writeback does not
            # land on this one.
            os.sync()
            cmd = _tool_commands(checkpoint, out_dir, cache_dir, args.mobius_ep, args.quant)[tool]
            # cwd=root: `python -m` puts the working directory first on
            # sys.path, so another checkout there would shadow the root's mobius.
            m = measure(cmd, env=env, cwd=root, log_path=os.path.join(out_root, f"{tool}.log"))
            runs[tool].append(m)
            print(f"bench: [{rep + 1}/{args.repeat}] {tool:6s} {m.wall_s:7.2f} s wall "
                  f"{m.cpu_s:7.2f} s CPU  peak RSS {_mib(m.peak_rss):7.0f} MiB  "
                  f"({m.processes} process(es))", file=sys.stderr)
    load_after = os.getloadavg()
    checks = {}
    for tool in tools:
        if tool == "copy":
            continue
        checks[tool] = verify_package(os.path.join(out_root, tool))
        print(f"bench: {tool} package loads in onnxruntime ({checks[tool]['session_s']} s)",
              file=sys.stderr)
    result = {
        "benchmark": "build",
        "checkpoint": {"path": checkpoint, "parameters": parameter_count(LLAMA_200M),
                       "bytes": _folder_bytes(checkpoint), "dtype": "float32",
                       "shards": NUM_SHARDS},
        "machine": machine_description(),
        "versions": versions(),
        "mobius_root": root,
        "mobius_commit": _git_commit(root),
        "repeat": args.repeat,
        "quant": args.quant,
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in load_after]},
        "tools": {},
    }
    for tool, ms in runs.items():
        result["tools"][tool] = {
            "wall_s": round(_median([m.wall_s for m in ms]), 3),
            "cpu_s": round(_median([m.cpu_s for m in ms]), 3),
            "peak_rss_mib": round(_mib(_median([m.peak_rss for m in ms])), 1),
            "wall_s_all": [round(m.wall_s, 3) for m in ms],
            "cpu_s_all": [round(m.cpu_s, 3) for m in ms],
            "peak_rss_mib_all": [round(_mib(m.peak_rss), 1) for m in ms],
            "max_processes": max(m.processes for m in ms),
            "command": _tool_commands(checkpoint, "OUT", "CACHE", args.mobius_ep, args.quant)[tool],
            **({"check": checks[tool]} if tool in checks else {}),
        }
    if "mobius" in runs and "peer" in runs:
        mob, peer = result["tools"]["mobius"], result["tools"]["peer"]
        result["ratios"] = {
            "wall": round(mob["wall_s"] / peer["wall_s"], 3),
            "peak_rss": round(mob["peak_rss_mib"] / peer["peak_rss_mib"], 3),
            "cpu": round(mob["cpu_s"] / peer["cpu_s"], 3),
        }
        result["targets"] = {"wall": 0.5, "peak_rss": 0.5}
    print(build_table(result))
    _write_json(args.json, result)
    return 0


def build_table(result: dict) -> str:
    tools = result["tools"]
    ratios = result.get("ratios")
    lines = [
        f"checkpoint: {result['checkpoint']['parameters'] / 1e6:.0f}M parameters, "
        f"{_mib(result['checkpoint']['bytes']):.0f} MiB float32 safetensors "
        f"({result['checkpoint']['shards']} shards); median of {result['repeat']} run(s); "
        f"{result['machine']}",
        "",
        "| tool | wall s | peak RSS MiB | wall ratio mobius/peer | RSS ratio mobius/peer | CPU s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for tool in ("mobius", "peer", "copy"):
        if tool not in tools:
            continue
        t = tools[tool]
        quant = result.get("quant")
        label = {"mobius": f"mobius build (f32{', ' + quant if quant else ''}, cpu)",
                 "peer": f"peer builder ({quant or 'fp32'}, cpu)", "copy": "floor: copytree"}[tool]
        wall_ratio = rss_ratio = ""
        if ratios and tool == "mobius":
            wall_ratio = f"{ratios['wall']:.2f} (target ≤ 0.50)"
            rss_ratio = f"{ratios['peak_rss']:.2f} (target ≤ 0.50)"
        elif ratios and tool == "copy":
            wall_ratio = f"({t['wall_s'] / tools['peer']['wall_s']:.2f})"
            rss_ratio = f"({t['peak_rss_mib'] / tools['peer']['peak_rss_mib']:.2f})"
        lines.append(f"| {label} | {t['wall_s']:.2f} | {t['peak_rss_mib']:.0f} | "
                     f"{wall_ratio} | {rss_ratio} | {t['cpu_s']:.2f} |")
    return "\n".join(lines)


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

_LAYER_RE = re.compile(r"layers[._/](\d+)[./_]")


def graph_stats(folder: str, num_layers: int) -> dict:
    """Node counts of model.onnx: total, per decoder layer, and outside the layers."""
    import onnx

    model = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
    per_layer: dict[int, int] = {}
    per_layer_ops: dict[str, int] = {}
    outside = 0
    for node in model.graph.node:
        text = node.name + " " + " ".join(node.output)
        match = _LAYER_RE.search(text)
        layer = int(match.group(1)) if match else -1
        if 0 <= layer < num_layers:
            per_layer[layer] = per_layer.get(layer, 0) + 1
            if layer == 1:
                per_layer_ops[node.op_type] = per_layer_ops.get(node.op_type, 0) + 1
        else:  # embedding, mask, final norm, lm_head (some name it layers.N)
            outside += 1
    total = len(model.graph.node)
    attributed = len(per_layer) == num_layers
    return {
        "nodes": total,
        # Per layer from names when every layer is recognisable, else the average.
        "nodes_per_layer": (statistics.median(per_layer.values()) if attributed
                            else round(total / num_layers, 1)),
        "nodes_outside_layers": outside if attributed else None,
        "layer_1_ops": dict(sorted(per_layer_ops.items())),
    }


def run_one(folder: str, prompt_tokens: int, decode_tokens: int, repeat: int) -> dict:
    """Times prefill and decode of one package with onnxruntime-genai (in this process)."""
    import numpy as np
    import onnxruntime_genai as og

    start = time.perf_counter()
    model = og.Model(folder)
    load_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    # Ids inside the tokenizer's vocabulary (600) and past the special tokens.
    prompt = rng.integers(10, 500, size=prompt_tokens).astype(np.int32)
    prefill, decode, generated = [], [], []
    for attempt in range(repeat + 1):  # the first one warms up
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=prompt_tokens + decode_tokens,
                                  min_length=prompt_tokens + decode_tokens, do_sample=False)
        generator = og.Generator(model, params)
        t0 = time.perf_counter()
        generator.append_tokens(prompt)
        t1 = time.perf_counter()
        steps = 0
        while steps < decode_tokens and not generator.is_done():
            generator.generate_next_token()
            steps += 1
        t2 = time.perf_counter()
        if attempt:
            prefill.append(t1 - t0)
            decode.append(steps / (t2 - t1))
            generated.append(steps)
        del generator
    return {"load_s": round(load_s, 3), "prefill_ms": round(1000 * _median(prefill), 2),
            "decode_tok_s": round(_median(decode), 2), "decode_steps": min(generated),
            "prefill_ms_all": [round(1000 * p, 2) for p in prefill],
            "decode_tok_s_all": [round(d, 2) for d in decode]}


def cmd_run(args) -> int:
    root = _repo_root()
    workdir = os.path.abspath(os.path.expanduser(args.workdir))
    packages = {"mobius": args.mobius, "peer": args.peer}
    if not all(packages.values()):
        checkpoint = make_checkpoint(workdir, seed=args.seed)
        out_root = _out_root(workdir, args.quant)
        env = _child_env(root)
        for tool in ("mobius", "peer"):
            if packages[tool]:
                continue
            out_dir = os.path.join(out_root, tool)
            if not os.path.isfile(os.path.join(out_dir, "genai_config.json")):
                print(f"bench: building the {tool} package into {out_dir}", file=sys.stderr)
                shutil.rmtree(out_dir, ignore_errors=True)
                cmd = _tool_commands(checkpoint, out_dir, os.path.join(out_root, "peer-cache"),
                                     quant=args.quant)
                measure(cmd[tool], env=env, cwd=root,
                        log_path=os.path.join(out_root, f"{tool}.log"))
            packages[tool] = out_dir
    num_layers = LLAMA_200M["num_hidden_layers"]
    result = {"benchmark": "run", "machine": machine_description(), "versions": versions(),
              "load_average": [round(x, 2) for x in os.getloadavg()],
              "prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
              "repeat": args.repeat, "quant": args.quant, "tools": {}}
    folders = {tool: os.path.abspath(folder) for tool, folder in packages.items()}
    for tool, folder in folders.items():
        verify_package(folder)
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
                env=_child_env(root), check=True, stdout=subprocess.PIPE, text=True)
            sample = json.loads(out.stdout.strip().splitlines()[-1])
            samples[tool].append(sample)
            print(f"bench: [{rep + 1}/{args.repeat}] {tool:6s} prefill {sample['prefill_ms']:8.1f} ms"
                  f"  decode {sample['decode_tok_s']:6.2f} tok/s", file=sys.stderr)
    for tool, folder in folders.items():
        runs = samples[tool]
        stats = {
            "load_s": round(_median([r["load_s"] for r in runs]), 3),
            "prefill_ms": round(_median([r["prefill_ms"] for r in runs]), 2),
            "decode_tok_s": round(_median([r["decode_tok_s"] for r in runs]), 2),
            "decode_steps": min(r["decode_steps"] for r in runs),
            "prefill_ms_all": [r["prefill_ms"] for r in runs],
            "decode_tok_s_all": [r["decode_tok_s"] for r in runs],
        }
        stats.update(graph_stats(folder, num_layers))
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

        result["logit_error"] = bench_quant.logit_errors(
            make_checkpoint(workdir, seed=args.seed), folders, args.prompt_tokens)
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

    build = sub.add_parser("build", help="build time and peak memory: mobius vs peer vs copy")
    common(build)
    build.add_argument("--mobius-ep", default="cpu",
                       help="mobius --ep for the build (default %(default)s, as the peer's -e cpu; "
                       "'' for mobius' own default)")
    build.add_argument("--tools", default="mobius,peer,copy",
                       type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
                       help="comma-separated subset of mobius,peer,copy")
    run = sub.add_parser("run", help="generation speed with onnxruntime-genai: mobius vs peer")
    common(run)
    run.add_argument("--mobius", metavar="PKG", help="mobius package folder (default: build it)")
    run.add_argument("--peer", metavar="PKG", help="peer package folder (default: build it)")
    run.add_argument("--prompt-tokens", type=int, default=128)
    run.add_argument("--decode-tokens", type=int, default=64)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_run-one"]:  # internal: one package, in a fresh process
        folder, prompt, decode, repeat = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
        print(json.dumps(run_one(folder, prompt, decode, repeat)))
        return 0
    workdir = os.environ.get("BUILD_WORKING_DIRECTORY")
    if workdir:  # `bazel run` starts in the runfiles tree; relative paths are the user's
        os.chdir(workdir)
    args = _parser().parse_args(argv)
    if args.repeat < 1:
        raise SystemExit("bench: --repeat must be at least 1")
    if args.command == "build":
        unknown = set(args.tools) - {"mobius", "peer", "copy"}
        if unknown:
            raise SystemExit(f"bench: unknown tool(s) {sorted(unknown)}")
        return cmd_build(args)
    return cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
