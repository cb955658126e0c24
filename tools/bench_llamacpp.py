"""llama.cpp as a CPU runtime peer (for tools/bench.py ``llamacpp``).

The same checkpoint runs as mobius' cpu package in onnxruntime-genai and as a
GGUF file in ``llama-bench``, at equal thread counts, each process pinned to
the same cores (taskset), the two runtimes alternating which goes first per
round. Pairs: f32 / F32, int8 / Q8_0, int4 / Q4_0 (llama-quantize's default
Q4_0 mix, as users get it). Reported: prefill tok/s of a 128-token prompt
(genai ``append_tokens``; llama-bench pp128), decode tok/s of 64 greedy steps
(genai ``generate_next_token`` after the prompt; llama-bench tg64 from an empty
context), and the package bytes on disk beside the GGUF file's.

llama.cpp is not a dependency: ``tools/setup_llamacpp.sh`` builds llama-bench
and llama-quantize from llama-cpp-python's sdist (PyPI), which vendors
llama.cpp with convert_hf_to_gguf.py; MOBIUS_LLAMA_CPP names that folder.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

ENV = "MOBIUS_LLAMA_CPP"
#: mobius variant -> (extra `mobius build` arguments, the GGUF type it is compared with)
VARIANTS = {
    "f32": ([], "F32"),
    "int8": (["--quant", "int8"], "Q8_0"),
    "int4": (["--quant", "int4"], "Q4_0"),  # token table int4 where the EP can (the default)
    "int4-float-emb": (["--quant", "int4", "--no-quant-embedding"], "Q4_0"),
}
#: issue 23: mobius/llama.cpp ratios for the int4 package (size: at most)
TARGETS = {"decode": 1.1, "prefill": 1.0, "size": 1.15}

# convert_hf_to_gguf.py refuses a BPE pre-tokenizer it has no hash for (the
# random benchmark checkpoint's tiny tokenizer); llama-bench never tokenizes,
# so such a tokenizer is written with llama.cpp's "default" pre-tokenizer. It
# also imports sentencepiece before it looks for tokenizer.model: without that
# file (every checkpoint here) the converter's own BPE fallback is taken.
_CONVERT = """
import os, runpy, sys
script = sys.argv[1]
sys.path.insert(0, os.path.dirname(script))
from conversion import base
known_pre, known_sp = base.TextModel.get_vocab_base_pre, base.TextModel._create_vocab_sentencepiece
def lenient_pre(self, tokenizer):
    try:
        return known_pre(self, tokenizer)
    except NotImplementedError:
        return "default"
def sentencepiece_if_any(self):
    if not (self.dir_model / "tokenizer.model").is_file():
        raise FileNotFoundError(self.dir_model / "tokenizer.model")
    return known_sp(self)
base.TextModel.get_vocab_base_pre = lenient_pre
base.TextModel._create_vocab_sentencepiece = sentencepiece_if_any
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def find_tools(folder: str | None = None) -> dict[str, str]:
    """Paths of llama-bench, llama-quantize and convert_hf_to_gguf.py, or a SystemExit
    that says how to build them."""
    folder = folder or os.environ.get(ENV) or _newest_cache()
    paths = {}
    if folder:
        paths = {"llama-bench": os.path.join(folder, "build", "bin", "llama-bench"),
                 "llama-quantize": os.path.join(folder, "build", "bin", "llama-quantize"),
                 "convert": os.path.join(folder, "vendor", "llama.cpp", "convert_hf_to_gguf.py")}
    missing = [name for name, path in paths.items() if not os.path.isfile(path)]
    if not paths or missing:
        raise SystemExit(
            f"bench llamacpp: llama.cpp tools not found ({', '.join(missing) or ENV + ' unset'}"
            f"{' in ' + folder if folder else ''}). Build them once (minutes of compiling; "
            f"downloads llama-cpp-python's sdist with pip):\n    tools/setup_llamacpp.sh\n"
            f"then set {ENV} to the folder it prints.")
    return paths


def _newest_cache() -> str | None:
    found = sorted(glob.glob(os.path.expanduser("~/.cache/mobius/llamacpp/llama_cpp_python-*/")))
    return found[-1].rstrip("/") if found else None


def gguf_files(tools: dict, checkpoint: str, out_dir: str, types: set[str], log) -> dict:
    """GGUF files of ``checkpoint`` by type (F32 converted, the others quantized from it),
    made once under ``out_dir``."""
    os.makedirs(out_dir, exist_ok=True)
    f32 = os.path.join(out_dir, "model-F32.gguf")
    if not os.path.isfile(f32):
        log(f"bench: converting {checkpoint} to {f32}")
        _check_call([sys.executable, "-c", _CONVERT, tools["convert"], checkpoint,
                     "--outfile", f32 + ".part", "--outtype", "f32"])
        os.rename(f32 + ".part", f32)
    files = {"F32": f32}
    for kind in sorted(types - {"F32"}):
        path = os.path.join(out_dir, f"model-{kind}.gguf")
        if not os.path.isfile(path):
            log(f"bench: llama-quantize {kind} -> {path}")
            _check_call([tools["llama-quantize"], f32, path + ".part", kind])
            os.rename(path + ".part", path)
        files[kind] = path
    return files


def _check_call(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}")
    return proc.stdout


def pinned(cmd: list[str], threads: int) -> list[str]:
    """``cmd`` confined to cores 0..threads-1 (both runtimes get the same cores)."""
    return ["taskset", "-c", f"0-{threads - 1}" if threads > 1 else "0", *cmd]


def parse_llama_bench(text: str) -> dict:
    """prefill / decode tok/s (mean and every sample) from ``llama-bench -o jsonl``."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record["n_prompt"] and not record["n_gen"]:
            key = "prefill"
        elif record["n_gen"] and not record["n_prompt"]:
            key = "decode"
        else:
            continue
        out[f"{key}_tok_s"] = round(float(record["avg_ts"]), 2)
        out[f"{key}_tok_s_all"] = [round(float(t), 2) for t in record["samples_ts"]]
        out["threads"] = int(record["n_threads"])
        out["model_type"] = record.get("model_type")
    missing = {"prefill_tok_s", "decode_tok_s"} - set(out)
    if missing:
        raise ValueError(f"llama-bench output lacks {sorted(missing)}:\n{text[-2000:]}")
    return out


def llama_bench(tools: dict, gguf: str, threads: int, prompt: int, decode: int,
                repeat: int) -> dict:
    cmd = [tools["llama-bench"], "-m", gguf, "-p", str(prompt), "-n", str(decode),
           "-t", str(threads), "-r", str(repeat), "-o", "jsonl"]
    proc = subprocess.run(pinned(cmd, threads), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise RuntimeError(f"llama-bench failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return parse_llama_bench(proc.stdout)


def genai_bench(bench_script: str, env: dict, folder: str, threads: int, prompt: int,
                decode: int, repeat: int) -> dict:
    """tools/bench.py's ``_run-one`` (one fresh process), pinned, at ``threads`` intra-op
    threads; prefill converted to tok/s."""
    cmd = [sys.executable, bench_script, "_run-one", folder, str(prompt), str(decode),
           str(repeat), str(threads)]
    proc = subprocess.run(pinned(cmd, threads), env=env, check=True, stdout=subprocess.PIPE,
                          text=True)
    sample = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"prefill_tok_s": round(1000 * prompt / sample["prefill_ms"], 2),
            "prefill_tok_s_all": [round(1000 * prompt / ms, 2) for ms in sample["prefill_ms_all"]],
            "decode_tok_s": sample["decode_tok_s"],
            "decode_tok_s_all": sample["decode_tok_s_all"], "threads": threads}


def pooled(runs: list[dict]) -> dict:
    """Median over every sample of every round, per measure."""
    from statistics import median

    out = {}
    for key in ("prefill_tok_s", "decode_tok_s"):
        samples = [s for run in runs for s in run[f"{key}_all"]]
        out[key] = round(median(samples), 2)
        out[f"{key}_range"] = [min(samples), max(samples)]
    return out


def ratios(mobius: dict, llama: dict, mobius_bytes: int, gguf_bytes: int) -> dict:
    """mobius / llama.cpp: throughput (higher is better for mobius) and size."""
    return {"prefill": round(mobius["prefill_tok_s"] / llama["prefill_tok_s"], 3),
            "decode": round(mobius["decode_tok_s"] / llama["decode_tok_s"], 3),
            "size": round(mobius_bytes / gguf_bytes, 3)}


def verdict(ratio: dict, targets: dict = TARGETS) -> dict:
    """Which targets a variant's ratios meet (size is an upper bound, the rest lower)."""
    out = {}
    for key, target in targets.items():
        if key in ratio:
            out[key] = ratio[key] <= target if key == "size" else ratio[key] >= target
    return out


def _order(rep: int) -> tuple[str, str]:
    return ("mobius", "llama.cpp") if rep % 2 == 0 else ("llama.cpp", "mobius")


def mobius_packages(command: list[str], out_root: str, variants: list[str], env: dict,
                    cwd: str, log) -> dict[str, str]:
    """mobius' cpu package of each variant under ``out_root`` (built once);
    ``command`` is the f32 ``mobius build`` command with OUT as its output folder."""
    folders = {}
    for variant in variants:
        folder = os.path.join(out_root, f"mobius-{variant}")
        if not os.path.isfile(os.path.join(folder, "genai_config.json")):
            log(f"bench: building mobius {variant} into {folder}")
            cmd = [folder if arg == "OUT" else arg for arg in command] + VARIANTS[variant][0]
            subprocess.run(cmd + ["--overwrite"], env=env, cwd=cwd, check=True)
        folders[variant] = folder
    return folders


def measure_all(args, tools: dict, packages: dict, ggufs: dict, bench_script: str,
                env: dict, log) -> dict:
    """Every (threads, variant) pair, ``args.repeat`` rounds, order alternated per round."""
    runs: dict[str, list] = {}
    for rep in range(args.repeat):
        for threads in args.threads:
            for variant, folder in packages.items():
                gguf = ggufs[VARIANTS[variant][1]]
                for runtime in _order(rep):
                    if runtime == "mobius":
                        run = genai_bench(bench_script, env, folder, threads, args.prompt_tokens,
                                          args.decode_tokens, args.samples)
                    else:
                        run = llama_bench(tools, gguf, threads, args.prompt_tokens,
                                          args.decode_tokens, args.samples)
                    runs.setdefault(f"{threads}/{variant}/{runtime}", []).append(run)
                    log(f"bench: [{rep + 1}/{args.repeat}] t={threads} {variant:8s} "
                        f"{runtime:9s} prefill {run['prefill_tok_s']:8.1f} tok/s  decode "
                        f"{run['decode_tok_s']:6.2f} tok/s  (load {os.getloadavg()[0]:.2f})")
    return runs


def summarise(runs: dict, packages: dict, ggufs: dict, threads: list[int]) -> list[dict]:
    """One row per (threads, variant): pooled medians, sizes, ratios, target verdicts."""
    from bench.measure import folder_bytes

    rows = []
    for t in threads:
        for variant, folder in packages.items():
            kind = VARIANTS[variant][1]
            mob = pooled(runs[f"{t}/{variant}/mobius"])
            llama = pooled(runs[f"{t}/{variant}/llama.cpp"])
            sizes = (folder_bytes(folder), os.path.getsize(ggufs[kind]))
            ratio = ratios(mob, llama, *sizes)
            rows.append({"threads": t, "variant": variant, "gguf": kind, "mobius": mob,
                         "llama.cpp": llama, "mobius_bytes": sizes[0], "gguf_bytes": sizes[1],
                         "ratios": ratio,
                         "meets": verdict(ratio) if variant.startswith("int4") else {}})
    return rows


def markdown(result: dict) -> str:
    head = (f"{result['checkpoint']}; prompt {result['prompt_tokens']} tokens, "
            f"{result['decode_tokens']} decode steps; median of every sample of "
            f"{result['repeat']} alternating round(s); load average before/after "
            f"{result['load_before']} / {result['load_after']}; {result['machine']}")
    lines = [head, "",
             "| threads | mobius | GGUF | prefill tok/s mobius | llama.cpp | ratio | "
             "decode tok/s mobius | llama.cpp | ratio | MiB mobius | GGUF | ratio |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        m, ll, r, meets = row["mobius"], row["llama.cpp"], row["ratios"], row["meets"]

        def mark(key):
            return f"**{r[key]:.2f}**" + ("" if key not in meets else
                                          " ✓" if meets[key] else " ✗")

        lines.append(
            f"| {row['threads']} | {row['variant']} | {row['gguf']} | "
            f"{m['prefill_tok_s']:.1f} | {ll['prefill_tok_s']:.1f} | {mark('prefill')} | "
            f"{m['decode_tok_s']:.1f} | {ll['decode_tok_s']:.1f} | {mark('decode')} | "
            f"{row['mobius_bytes'] / 2**20:.1f} | {row['gguf_bytes'] / 2**20:.1f} | "
            f"{mark('size')} |")
    lines += ["", "int4 targets (mobius / llama.cpp Q4_0): prefill ≥ "
              f"{TARGETS['prefill']}, decode ≥ {TARGETS['decode']}, size ≤ {TARGETS['size']}"]
    return "\n".join(lines)


def run(args, tools: dict, *, checkpoint: str, label: str, command: list[str],
        bench_script: str, env: dict, cwd: str, log) -> dict:
    """The whole benchmark of one checkpoint with ``tools`` (find_tools); ``command``
    builds mobius' f32 package to OUT."""
    from bench.measure import machine_description, versions

    out_root = os.path.join(args.workdir, "llamacpp", label)
    packages = mobius_packages(command, out_root, args.variants, env, cwd, log)
    ggufs = gguf_files(tools, checkpoint, os.path.join(out_root, "gguf"),
                       {VARIANTS[v][1] for v in args.variants}, log)
    load_before = [round(x, 2) for x in os.getloadavg()]
    runs = measure_all(args, tools, packages, ggufs, bench_script, env, log)
    return {"benchmark": "llamacpp", "checkpoint": label, "machine": machine_description(),
            "versions": versions(), "llama_cpp": tools["llama-bench"],
            "prompt_tokens": args.prompt_tokens, "decode_tokens": args.decode_tokens,
            "repeat": args.repeat, "samples": args.samples, "load_before": load_before,
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "rows": summarise(runs, packages, ggufs, args.threads), "runs": runs}
