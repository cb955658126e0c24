"""``bench optimum``: Optimum's own exporter against mobius' ``--layout optimum``.

    ./bazelw run //tools:bench -- optimum [--cases t5,whisper] [--json FILE]

On the same tiny random transformers checkpoints (decoder, encoder, encoder-decoders),
each tool runs in its own process, measured by tools/bench/measure.py (wall, peak RSS
of the process tree):

* ``mobius``:  ``python3 -m mobius build --model CKPT OUT --layout optimum --ep cpu``
* ``optimum``: optimum-onnx 0.1.0's ``main_export(CKPT, OUT, task=...)`` (its default:
  post-processed, merged decoders), under $MOBIUS_OPTIMUM_SITE (./bazelw installs
  requirements-optimum.txt there; transformers 4.57 with it)

then the folder's bytes, and whether the task's ``ORTModelFor*`` class loads it and
runs one step (generate 2 tokens, or one forward) -- or Optimum's error.

This is a benchmark, not a test: nothing here runs under ``bazel test``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

from bench import measure

#: case -> (tiny preset, Optimum's task name, ORTModelFor... class)
CASES = {
    "llama": ("tiny-llama", "text-generation-with-past", "CausalLM"),
    "qwen3": ("tiny-qwen3", "text-generation-with-past", "CausalLM"),
    "bert": ("tiny-bert", "feature-extraction", "FeatureExtraction"),
    "t5": ("tiny-t5", "text2text-generation-with-past", "Seq2SeqLM"),
    "bart": ("tiny-bart", "text2text-generation-with-past", "Seq2SeqLM"),
    "whisper": ("tiny-whisper", "automatic-speech-recognition-with-past", "SpeechSeq2Seq"),
}
_EXPORT = ("import sys\nfrom optimum.exporters.onnx import main_export\n"
           "main_export(sys.argv[1], output=sys.argv[2], task=sys.argv[3], device='cpu')\n")
#: loads a folder in ORTModelFor<argv[2]> and runs one step; prints "ok" or the error
_LOAD = """import sys, json, torch
import optimum.onnxruntime as ort
try:
    model = getattr(ort, "ORTModelFor" + sys.argv[2]).from_pretrained(sys.argv[1])
    config = model.config
    if sys.argv[2] == "SpeechSeq2Seq":
        frames = 2 * config.max_source_positions
        feeds = {"input_features": torch.randn(1, config.num_mel_bins, frames)}
    else:
        feeds = {"input_ids": torch.tensor([[5, 6, 7, 8]]),
                 "attention_mask": torch.ones(1, 4, dtype=torch.int64)}
    if sys.argv[2] == "FeatureExtraction":
        model(**feeds)
    else:
        model.generate(**feeds, max_new_tokens=2, min_new_tokens=2, do_sample=False)
    print(json.dumps("ok"))
except Exception as e:
    print(json.dumps(f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"))
"""


def add_parser(sub, workdir: str) -> None:
    parser = sub.add_parser("optimum", help="Optimum's exporter vs mobius --layout optimum")
    parser.add_argument("--workdir", default=os.path.join(workdir, "optimum"))
    parser.add_argument("--cases", default=",".join(CASES),
                        type=lambda s: [t.strip() for t in s.split(",") if t.strip()])
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")


def command(args, root: str, write_json) -> int:
    unknown = set(args.cases) - set(CASES)
    if unknown:
        raise SystemExit(f"bench: unknown case(s) {sorted(unknown)}")
    result = run(args.workdir, root, args.cases, log=lambda m: print(m, file=sys.stderr))
    print(markdown(result))
    write_json(args.json, result)
    return 0


def optimum_site() -> str:
    """$MOBIUS_OPTIMUM_SITE, else the newest ./bazelw install under ~/.cache/mobius."""
    site = os.environ.get("MOBIUS_OPTIMUM_SITE")
    if not site:
        found = sorted(glob.glob(os.path.expanduser("~/.cache/mobius/optimum-site-*/.complete")),
                       key=os.path.getmtime)
        site = os.path.dirname(found[-1]) if found else ""
    if not os.path.isfile(os.path.join(site, "optimum", "exporters", "onnx", "__init__.py")):
        raise SystemExit("bench optimum: optimum-onnx is not installed; run any ./bazelw "
                         "test once (it installs requirements-optimum.txt) or set "
                         "MOBIUS_OPTIMUM_SITE")
    return site


def run(workdir: str, root: str, cases: list[str], log=print) -> dict:
    """{case: {tool: {wall_s, peak_rss_mib, mib, loads}}} for every case."""
    from testing.hf_checkpoints import make_hf_checkpoint

    site = optimum_site()
    mobius_env = measure.child_env(root)
    optimum_env = {**mobius_env, "PYTHONPATH": site}
    results = {}
    for case in cases:
        preset, task, cls = CASES[case]
        ckpt = os.path.join(workdir, "ckpt", case)
        if not os.path.isfile(os.path.join(ckpt, "config.json")):
            make_hf_checkpoint(ckpt, preset)
        commands = {
            "mobius": ([sys.executable, "-m", "mobius", "build", "--model", ckpt, "OUT",
                        "--layout", "optimum", "--ep", "cpu", "--quiet"], mobius_env),
            "optimum": ([sys.executable, "-c", _EXPORT, ckpt, "OUT", task], optimum_env),
        }
        results[case] = {}
        for tool, (command, env) in commands.items():
            out = os.path.join(workdir, "out", f"{case}-{tool}")
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            command = [out if part == "OUT" else part for part in command]
            log(f"{case}: {tool} ...")
            results[case][tool] = _one(command, env, out, cls, optimum_env, root)
    return results


def _one(command, env, out, cls, optimum_env, root) -> dict:
    try:
        m = measure.measure(command, env=env, log_path=out + ".log", cwd=root)
    except RuntimeError as e:
        return {"error": str(e).splitlines()[-1][:160]}
    loaded = subprocess.run([sys.executable, "-c", _LOAD, out, cls], env=optimum_env,
                            capture_output=True, text=True, cwd=root)
    lines = loaded.stdout.strip().splitlines()
    loads = json.loads(lines[-1]) if lines else f"exit {loaded.returncode}"
    return {"wall_s": round(m.wall_s, 2), "peak_rss_mib": round(measure.mib(m.peak_rss)),
            "mib": round(measure.mib(measure.folder_bytes(out)), 2), "loads": loads}


def markdown(results: dict) -> str:
    rows = ["| checkpoint | tool | build wall s | peak RSS MiB | package MiB | loads in ORTModelFor* |",
            "|---|---|---|---|---|---|"]
    for case, tools in results.items():
        for tool, r in tools.items():
            if "error" in r:
                rows.append(f"| {case} | {tool} | failed: {r['error']} | | | |")
                continue
            loads = "yes" if r["loads"] == "ok" else f"no: {r['loads']}"
            rows.append(f"| {case} | {tool} | {r['wall_s']} | {r['peak_rss_mib']} | "
                        f"{r['mib']} | {loads} |")
    return "\n".join(rows)
