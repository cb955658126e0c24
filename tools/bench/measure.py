"""Measuring a tool run: wall time, CPU time and the peak RSS of its process tree.

Also the machine and package descriptions that go with every result.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time


def folder_bytes(folder: str) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            total += os.path.getsize(os.path.join(dirpath, name))
    return total


def warm_page_cache(folder: str) -> None:
    """Reads every file once so no tool pays for the cold first read."""
    for dirpath, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                while f.read(16 << 20):
                    pass


def flush_s(folder: str) -> float:
    """Seconds to fsync every file and folder under ``folder``: the writeback a tool
    left to the kernel when it exited (near 0 for a tool that fsyncs its output)."""
    start = time.perf_counter()
    for dirpath, _, files in os.walk(folder, topdown=False):
        for path in [os.path.join(dirpath, name) for name in files] + [dirpath]:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return time.perf_counter() - start


class Measurement:
    def __init__(self, wall_s: float, cpu_s: float, peak_rss: int, peak_single: int,
                 processes: int):
        self.wall_s = wall_s
        self.cpu_s = cpu_s  # user + system seconds of the child and its reaped descendants
        self.peak_rss = peak_rss  # bytes: the process tree's peak (see measure())
        self.peak_single = peak_single  # bytes: the largest one process's own VmHWM
        self.processes = processes  # most processes seen at once in the tree
        self.flush_s = 0.0  # writeback of its output still pending at exit (see flush_s())


def proc_rss(pid: int) -> tuple[int, int]:
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
                rss, hwm = proc_rss(p)
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



def child_env(root: str) -> dict:
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
            "package_bytes": folder_bytes(folder)}


def median(values):
    return statistics.median(values)


def mib(n: float) -> float:
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


def git_commit(root: str) -> str | None:
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
