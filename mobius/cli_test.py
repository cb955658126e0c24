"""The CLI on bad input: one clear line on stderr, a non-zero exit, and nothing written.

Error cases run in-process through ``mobius.cli.main`` (fast); a few run as a real
``python -m mobius`` process, where logging and progress bars would show up on
stderr if they leaked into an error report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from mobius.cli import main
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors
from testing.file_tree import file_contents

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DROPPED = "model.layers.1.mlp.down_proj.weight"
RESHAPED = "model.layers.0.self_attn.k_proj.weight"


def _rewrite(folder, change):
    checkpoint = SafetensorsCheckpoint(folder)
    tensors = {n: np.array(checkpoint.read(n)) for n in checkpoint.names()}
    del checkpoint
    change(tensors)
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors)


def _drop(folder):
    _rewrite(folder, lambda t: t.pop(DROPPED))


def _reshape(folder):
    def change(tensors):
        tensors[RESHAPED] = np.zeros((16, 64), np.float32)  # expected [32, 64]
    _rewrite(folder, change)


def _truncate(folder):
    path = os.path.join(folder, "model.safetensors")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 100)


def _garbage(folder):
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(np.random.default_rng(0).integers(0, 256, 5000, np.uint8).tobytes())


def _unknown_type(folder):
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        raw = json.load(f)
    raw.update(model_type="foobar", architectures=["FoobarForCausalLM"])
    with open(path, "w") as f:
        json.dump(raw, f)


VARIANTS = {"drop": _drop, "reshape": _reshape, "truncate": _truncate, "garbage": _garbage,
            "unknown_type": _unknown_type}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    base = make_tiny_checkpoint("tiny-llama", str(root / "base"))
    folders = {"base": base}
    for name, change in VARIANTS.items():
        folders[name] = str(root / name)
        shutil.copytree(base, folders[name])
        change(folders[name])
    return folders


def _cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_error_line(code, err, *fragments):
    assert code != 0
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert lines[0].startswith("mobius: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


# ---------------------------------------------------------------------------
# Bad checkpoints and options (in-process)
# ---------------------------------------------------------------------------

CASES = {
    # name: (checkpoint variant, extra args, fragments the message must contain)
    "unknown_model_type": ("unknown_type", [], ["'foobar'", "supported:", "llama", "qwen3"]),
    "missing_tensor": ("drop", [], [f"missing tensor '{DROPPED}'"]),
    "shape_mismatch": ("reshape", [], [f"'{RESHAPED}'", "[16, 64]", "[32, 64]"]),
    "truncated_safetensors": ("truncate", [], ["model.safetensors is truncated"]),
    "corrupt_safetensors": ("garbage", [], ["model.safetensors is", "corrupt"]),
    "unknown_dtype": ("base", ["--dtype", "f8"], ["unknown dtype 'f8'", "f32, f16, bf16"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_writes_nothing(case, checkpoints, capsys, tmp_path):
    variant, extra, fragments = CASES[case]
    out = tmp_path / "out"
    code, _, err = _cli(capsys, "build", "--model", checkpoints[variant], str(out), *extra)
    _assert_one_error_line(code, err, *fragments)
    assert os.listdir(tmp_path) == []  # no output, no .partial- staging folder


def test_missing_checkpoint_folder(capsys, tmp_path):
    code, _, err = _cli(capsys, "build", "--model", str(tmp_path / "nope"), str(tmp_path / "out"))
    _assert_one_error_line(code, err, "no such checkpoint folder", "nope")
    assert os.listdir(tmp_path) == []


def test_no_output_given(checkpoints, capsys):
    code, _, err = _cli(capsys, "build", "--model", checkpoints["base"])
    _assert_one_error_line(code, err, "no output folder given")


# ---------------------------------------------------------------------------
# Output locations
# ---------------------------------------------------------------------------


def test_unwritable_output_location(checkpoints, capsys):
    # Tests run as root, where chmod does not stop writes; /proc refuses new folders.
    out = f"/proc/mobius-test-{os.getpid()}/out"
    code, _, err = _cli(capsys, "build", "--model", checkpoints["base"], out)
    _assert_one_error_line(code, err, "cannot write to", "/proc/mobius-test-")
    assert not os.path.exists(out)


def test_file_in_the_way_of_the_output_folder(checkpoints, capsys, tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    code, _, err = _cli(capsys, "build", "--model", checkpoints["base"],
                        str(tmp_path / "afile" / "sub" / "out"))
    _assert_one_error_line(code, err, "cannot write to", "afile")
    assert sorted(os.listdir(tmp_path)) == ["afile"]
    assert (tmp_path / "afile").read_text() == "not a folder"


def test_output_path_is_a_file(checkpoints, capsys, tmp_path):
    (tmp_path / "out").write_text("x")
    code, _, err = _cli(capsys, "build", "--model", checkpoints["base"], str(tmp_path / "out"))
    _assert_one_error_line(code, err, "exists and is not a folder")
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert (tmp_path / "out").read_text() == "x"


def test_non_empty_output_without_overwrite(checkpoints, capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code, _, err = _cli(capsys, "build", "--model", checkpoints["base"], str(out))
    _assert_one_error_line(code, err, "is not empty", "--overwrite")
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert file_contents(out) == {"keep.txt": b"mine"}


def test_empty_existing_output_folder_is_fine(checkpoints, capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    code, stdout, _ = _cli(capsys, "build", "-q", "--model", checkpoints["base"], str(out))
    assert code == 0
    assert {"model.onnx", "model.onnx.data", "genai_config.json"} <= set(os.listdir(out))
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_overwrite_replaces_an_existing_package(checkpoints, capsys, tmp_path):
    out = tmp_path / "out"
    code, _, _ = _cli(capsys, "build", "-q", "--model", checkpoints["base"], str(out))
    assert code == 0
    (out / "stale.txt").write_text("from an older build")
    manifest = json.loads((out / "mobius_package.json").read_text())
    manifest["files"].append("stale.txt")  # as if the older build had written it
    (out / "mobius_package.json").write_text(json.dumps(manifest))
    first = file_contents(out)
    code, stdout, _ = _cli(capsys, "build", "--model", checkpoints["base"], "--dtype", "f16",
                           "--overwrite", str(out))
    assert code == 0
    assert f"wrote {out}" in stdout
    second = file_contents(out)
    assert "stale.txt" not in second  # replaced, not merged
    assert set(second) == set(first) - {"stale.txt"}
    assert second["mobius_package.json"] != first["mobius_package.json"]
    assert second["model.onnx.data"] != first["model.onnx.data"]  # f16 now
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no staging / backup folders left


def test_output_flag_spelling(checkpoints, capsys, tmp_path):
    code, _, _ = _cli(capsys, "build", "-q", "-m", checkpoints["base"], "-o",
                      str(tmp_path / "out"))
    assert code == 0
    assert (tmp_path / "out" / "model.onnx").is_file()


# ---------------------------------------------------------------------------
# --help, list, and real processes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--help"], ["build", "--help"], ["list", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: mobius")
    if argv[0] == "build":
        for flag in ("--model", "--dtype", "--overwrite", "--debug"):
            assert flag in out


def test_list_tiny(capsys):
    code, out, _ = _cli(capsys, "list", "tiny")
    assert code == 0
    assert "tiny-llama\tllama" in out.splitlines()
    assert "tiny-lfm2-audio\tLfm2AudioForConditionalGeneration" in out.splitlines()


def test_list_tasks_reads_the_task_registry(capsys):
    from mobius.tasks.registry import TASKS

    code, out, _ = _cli(capsys, "list", "tasks")
    assert code == 0
    rows = out.splitlines()
    assert rows[0].split()[0] == "task" and len(rows) == 1 + len(TASKS)
    assert [row.split()[0] for row in rows[1:]] == list(TASKS)


def test_list_peer_shows_every_architecture_of_the_peer(capsys):
    from mobius.models.catalog import PEER_ARCHITECTURES

    code, out, _ = _cli(capsys, "list", "peer")
    rows = out.splitlines()
    assert code == 0 and len(rows) == 1 + len(PEER_ARCHITECTURES)
    llama = 1 + [a for a, _ in PEER_ARCHITECTURES].index("LlamaForCausalLM")
    assert rows[llama].split()[-1] == "llama"


def _process(*argv, env_extra=None):
    env = {**os.environ, "PYTHONPATH": _ROOT, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "mobius", *argv], cwd=_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_process_error_is_one_line_even_without_quiet(checkpoints, tmp_path):
    result = _process("build", "--model", checkpoints["unknown_type"], str(tmp_path / "out"))
    assert result.returncode == 1
    _assert_one_error_line(result.returncode, result.stderr, "'foobar'", "supported:")
    assert result.stdout == ""
    assert os.listdir(tmp_path) == []


def test_process_non_empty_output_fails_after_a_full_build(checkpoints, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = _process("build", "--model", checkpoints["base"], str(out))
    _assert_one_error_line(result.returncode, result.stderr, "is not empty")
    assert file_contents(out) == {"keep.txt": b"mine"}
    assert sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.parametrize("position", ["global", "subcommand"])
def test_debug_shows_a_traceback(checkpoints, tmp_path, position):
    args = ["build", "--model", checkpoints["drop"], str(tmp_path / "out")]
    args = ["--debug", *args] if position == "global" else [*args, "--debug"]
    result = _process(*args)
    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stderr
    assert f"WeightsError: checkpoint is missing tensor '{DROPPED}'" in result.stderr
    assert os.listdir(tmp_path) == []
