"""Crash consistency and concurrency of ModelPackage.save.

Each save runs in a child process that is killed (SIGKILL) or interrupted
(SIGINT) at one named step of save (MOBIUS_SAVE_CRASH_AT), with renameat2 and
with the portable fallback. After every kill the output is the complete old
or the complete new package, and the next save leaves no hidden folders.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback

import numpy as np
import onnx_ir as ir
import pytest

from mobius.errors import OutputError
from mobius.package.model_package import ModelPackage
from mobius.package.output_swap import OutputExistsError, make_staging, mark_ready, place
from testing.small_disk import run_on_small_disk

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD = """
import os, sys, time
sys.path.insert(0, {root!r})
from mobius.package.output_swap_test import tiny_package
out, version, overwrite, gate = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
while gate and not os.path.exists(gate):
    time.sleep(0.005)
tiny_package(version).save(out, overwrite=overwrite)
"""


def tiny_package(version: int) -> ModelPackage:
    """A one-Add model whose weight and version.json both say ``version``."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([4096]))
    w = ir.Value(name="w", const_value=ir.tensor(np.full(4096, version, np.float32), name="w"))
    add = ir.node("Add", [x, w], num_outputs=1)
    add.outputs[0].name = "y"
    graph = ir.Graph([x], add.outputs, nodes=[add], initializers=[w], opset_imports={"": 21})
    return ModelPackage(models={"model": ir.Model(graph, ir_version=10)},
                        extra_json={"version.json": {"version": version}})


class _Child:
    """A save in a forked child of this process (the part of ``subprocess.Popen`` used here).

    A fork shares this process's imports: ~50 children per run that each started an
    interpreter and imported numpy, onnx_ir and mobius cost most of this test's CPU. The
    child is still its own process, killed by its own signal at the named step.
    """

    def __init__(self, out, version, overwrite, env, gate, ready):
        read_end, write_end = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover (the child)
            os.close(read_end)
            self._save(write_end, out, version, overwrite, env, gate, ready)
        os.close(write_end)
        self.stderr = os.fdopen(read_end, "r")
        self.returncode = None

    @staticmethod
    def _save(err_fd, out, version, overwrite, env, gate, ready):
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh python
            os.environ.clear()
            os.environ.update(env)
            if ready:
                open(ready, "w").close()
            while gate and not os.path.exists(gate):
                time.sleep(0.005)
            tiny_package(version).save(str(out), overwrite=overwrite)
            code = 0
        except BaseException:
            with os.fdopen(err_fd, "w") as err:
                traceback.print_exc(file=err)
        finally:
            os._exit(code)

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                raise TimeoutError(f"save child {self.pid} still running after {timeout} s")
            else:
                time.sleep(0.005)
        return self.returncode

    def communicate(self, timeout):
        self.wait(timeout)
        return None, self.stderr.read()


def _run(out, version, overwrite=True, crash=None, portable=False, gate="", ready=""):
    """tiny_package(version).save(out) in a child process; ``ready``: a file the child
    makes before it waits for ``gate`` to exist."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOBIUS_SAVE_")}
    if crash:
        env["MOBIUS_SAVE_CRASH_AT"] = crash
    if portable:
        env["MOBIUS_SAVE_PORTABLE_RENAME"] = "1"
    return _Child(out, version, overwrite, env, gate, ready)


def _version(out) -> int | None:
    """The version of the complete package in ``out``; fails on an incomplete one."""
    if not os.path.exists(out):
        return None
    assert sorted(os.listdir(out)) == ["mobius_package.json", "model.onnx", "model.onnx.data",
                                       "version.json"]
    with open(os.path.join(out, "version.json")) as f:
        version = json.load(f)["version"]
    data = np.fromfile(os.path.join(out, "model.onnx.data"), np.float32)
    assert data.shape == (4096,) and (data == version).all()
    return version


def _save(out, version, **kwargs):
    child = _run(out, version, **kwargs)
    _, err = child.communicate(timeout=120)
    return child.returncode, err


# (step, portable, version in OUT after the kill, after the next save's recovery)
_STEPS = [
    ("fsync", False, 1), ("ready", False, 1), ("exchange", False, 2),
    ("fsync", True, 1), ("ready", True, 1), ("rename-old", True, None), ("rename-new", True, 2),
]


@pytest.mark.parametrize("signal_name", ["KILL", "INT"])
@pytest.mark.parametrize("step,portable,after_kill", _STEPS)
def test_overwrite_killed_at_each_step(tmp_path, step, portable, after_kill, signal_name):
    out = tmp_path / "out"
    tiny_package(1).save(str(out))
    crash = step if signal_name == "KILL" else f"{step}:INT"
    returncode, _ = _save(out, 2, crash=crash, portable=portable)
    assert returncode != 0
    if signal_name == "INT" and step == "rename-old":
        after_kill = 1  # the interrupt undoes the first rename itself
    assert _version(out) == after_kill
    ModelPackage.check_output(str(out), overwrite=True)  # what the next build runs first
    assert _version(out) == (after_kill or 2)  # a killed swap is finished, never lost
    assert sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.parametrize("signal_name", ["KILL", "INT"])
@pytest.mark.parametrize("step", ["fsync", "ready", "rename"])
def test_new_output_killed_at_each_step(tmp_path, step, signal_name):
    out = tmp_path / "out"
    returncode, _ = _save(out, 1, overwrite=False,
                          crash=step if signal_name == "KILL" else f"{step}:INT")
    assert returncode != 0
    assert _version(out) == (1 if step == "rename" else None)
    tiny_package(2).save(str(out), overwrite=True)
    assert _version(out) == 2 and sorted(os.listdir(tmp_path)) == ["out"]


def test_cli_interrupt_after_the_rename_reports_the_package(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, MOBIUS_SAVE_CRASH_AT="exchange:INT", PYTHONPATH=_ROOT)
    tiny_package(1).save(str(out))
    result = subprocess.run([sys.executable, "-m", "mobius", "build", "-q", "--model",
                             "tiny-llama", str(out), "--overwrite"],
                            env={**env, "MOBIUS_CACHE": str(tmp_path / "cache")},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 130
    assert result.stderr.strip().splitlines() == [
        f"mobius: interrupted; the package was already complete in {out}"]
    assert "model.onnx" in os.listdir(out) and "version.json" not in os.listdir(out)


@pytest.mark.parametrize("portable", [False, True])
@pytest.mark.parametrize("overwrite", [False, True])
def test_concurrent_saves_into_one_output(tmp_path, overwrite, portable):
    out, gate = tmp_path / "out", tmp_path / "gate"
    children = [_run(out, v, overwrite=overwrite, portable=portable, gate=str(gate),
                     ready=str(tmp_path / f"ready-{v}")) for v in range(1, 6)]
    for v in range(1, 6):  # every child reaches the gate before it opens
        while not (tmp_path / f"ready-{v}").exists():
            time.sleep(0.005)
        (tmp_path / f"ready-{v}").unlink()
    gate.touch()
    results = [(c.wait(timeout=120), c.stderr.read()) for c in children]
    gate.unlink()
    winners = [v for v, (rc, _) in zip(range(1, 6), results) if rc == 0]
    if overwrite:
        assert len(winners) == 5 and _version(out) in winners
    else:
        assert winners == [_version(out)]  # exactly one, and OUT is its complete package
        for rc, err in results:
            assert rc == 0 or "is not empty" in err.splitlines()[-1]
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_existing_content_survives_concurrent_saves_without_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("mine")
    children = [_run(out, v, overwrite=False) for v in range(1, 4)]
    assert all(c.wait(timeout=120) != 0 for c in children)
    assert os.listdir(out) == ["precious.txt"] and sorted(os.listdir(tmp_path)) == ["out"]


def test_output_appearing_during_the_build_is_not_replaced(tmp_path):
    out = tmp_path / "out"
    ModelPackage.check_output(str(out))  # the check before the build passes
    staging = make_staging(str(out))
    tiny_package(1)._write(staging, progress=False)
    ready = mark_ready(staging)
    out.mkdir()  # the user makes it while the package is being written
    (out / "precious.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="appeared while building"):
        place(ready, str(out), overwrite=False)
    assert os.listdir(out) == ["precious.txt"]


def test_stale_staging_of_a_dead_process_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    for kind in ("partial", "ready"):
        (tmp_path / f".out.{kind}-{dead}-abc123").mkdir()
    live = tmp_path / f".out.partial-{os.getppid()}-abc123"
    live.mkdir()
    tiny_package(1).save(str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == [live.name, "out"]  # a live build's is kept


def test_the_output_never_overlaps_the_input(tmp_path):
    from mobius.package.overlap import check_no_overlap

    checkpoint = tmp_path / "ckpt"
    (checkpoint / "sub").mkdir(parents=True)
    for out, word in [(checkpoint, "is"), (checkpoint / "sub", "lies inside"),
                      (tmp_path, "contains")]:
        with pytest.raises(OutputError, match=f"{word} the input checkpoint"):
            check_no_overlap(str(out), str(checkpoint))
    link = tmp_path / "link"
    link.symlink_to(checkpoint)
    with pytest.raises(OutputError, match="is the input checkpoint"):
        check_no_overlap(str(link), str(checkpoint))
    check_no_overlap(str(tmp_path / "other"), str(checkpoint))


def test_full_disk_says_no_space_left(tmp_path):
    """A 8 KiB tmpfs (mounted in a private user + mount namespace) cannot hold the package."""
    disk = tmp_path / "disk"
    stdout, stderr = run_on_small_disk(str(disk), "8k", _CHILD.format(root=_ROOT),
                                       f"{disk}/out", "1", "0", "")
    assert f"OutputError: no space left on the device holding {disk}" in stderr
    assert stdout.strip() == "rc=1 left:"  # the staging folder was removed


@pytest.mark.parametrize("overwrite", [False, True])
def test_concurrent_cli_builds_of_different_checkpoints(tmp_path, overwrite):
    """Three `mobius build` processes, three families, one OUT."""
    out = tmp_path / "work" / "out"
    out.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": _ROOT, "MOBIUS_CACHE": str(tmp_path / "cache")}
    names = ["tiny-llama", "tiny-qwen3", "tiny-gpt2"]
    children = [subprocess.Popen([sys.executable, "-m", "mobius", "build", "-q", "--model", name,
                                  str(out), *(["--overwrite"] if overwrite else [])],
                                 env=env, stderr=subprocess.PIPE, text=True) for name in names]
    results = [(c.wait(timeout=300), c.stderr.read()) for c in children]
    winners = [n for n, (rc, _) in zip(names, results) if rc == 0]
    with open(out / "genai_config.json") as f:
        model_type = json.load(f)["model"]["type"]
    if overwrite:
        assert len(winners) == 3, results
    else:
        assert len(winners) == 1, results
        for rc, err in results:
            assert rc == 0 or (err.count("\n") == 1 and err.startswith("mobius: error: output "
                                                                        "folder")), err
    from mobius.package.genai_config import genai_model_type

    # OUT is a complete package of one of the winners, never a mix or a leftover
    assert model_type in {genai_model_type(n.removeprefix("tiny-")) for n in winners}
    assert os.path.getsize(out / "model.onnx.data") > 0
    assert sorted(os.listdir(out.parent)) == ["out"]  # no staging left by anyone
