"""Hostile and unlucky inputs (issue #8): one `mobius: error:` line naming the field,
tensor or file, a non-zero exit, nothing written, and the checkpoint untouched.

Resource bombs run in a child under a memory limit (testing/fork_server.py),
so a bomb that slipped past the checks fails the test, not the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

from mobius.cli import main
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors
from testing.file_tree import file_contents
from testing.fork_server import ROOT, ForkServer

WEIGHT = "model.layers.0.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("base") / "llama"))


@pytest.fixture
def ckpt(base, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(base, folder)
    return folder


def _edit_json(path, **changes):
    with open(path) as f:
        raw = json.load(f)
    raw.update(changes)
    with open(path, "w") as f:
        json.dump(raw, f)


def _fails_cleanly(capsys, ckpt, tmp_path, *fragments, extra=()):
    before = file_contents(ckpt)
    code = main(["build", "-q", "--model", str(ckpt), str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith("mobius: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert sorted(os.listdir(tmp_path)) == ["ckpt"] and file_contents(ckpt) == before


def _write_raw_safetensors(path, header: bytes, data: bytes):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


def _tensors(folder) -> dict[str, np.ndarray]:
    checkpoint = SafetensorsCheckpoint(str(folder))
    return {n: np.array(checkpoint.read(n)) for n in checkpoint.names()}


# ---------------------------------------------------------------------------
# Silently wrong packages: now errors (or a warning where the numbers are the checkpoint's)
# ---------------------------------------------------------------------------

CONFIG_CASES = {
    "tie_string": ({"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be true or false"),
    "tie_int": ({"tie_word_embeddings": 0}, "'tie_word_embeddings' must be true or false"),
    "theta_negative": ({"rope_theta": -5.0}, "'rope_theta' must be a positive finite number"),
    "theta_zero": ({"rope_theta": 0}, "'rope_theta' must be a positive finite number"),
    "theta_nan": ({"rope_theta": float("nan")}, "'rope_theta' is nan"),
    "theta_inf": ({"rope_theta": float("inf")}, "'rope_theta' is inf"),
    "eps_string": ({"rms_norm_eps": "1e-5"}, "'rms_norm_eps' must be a number"),
    "eps_negative": ({"rms_norm_eps": -1}, "'rms_norm_eps' must be a positive finite number"),
    "eps_zero": ({"rms_norm_eps": 0.0}, "'rms_norm_eps' must be a positive finite number"),
    "layer_norm_eps_negative": ({"rms_norm_eps": None, "layer_norm_eps": -1e-5},
                                "'layer_norm_eps' must be a positive finite number"),
    "pad_out_of_vocab": ({"pad_token_id": 5000}, "'pad_token_id' must be a token id"),
    "bias_string": ({"attention_bias": "no"}, "'attention_bias' must be true or false"),
    "eos_out_of_vocab": ({"eos_token_id": 10**6}, "'eos_token_id' must be a token id"),
    "layers_beyond_checkpoint": ({"num_hidden_layers": 3}, "cover 2 layers"),
    "hidden_beyond_checkpoint": ({"hidden_size": 4096, "head_dim": 16},
                                 "'hidden_size' is 4096, larger than every tensor dimension"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_CASES))
def test_bad_config_value(case, ckpt, tmp_path, capsys):
    changes, fragment = CONFIG_CASES[case]
    _edit_json(ckpt / "config.json", **changes)
    os.remove(ckpt / "generation_config.json")  # its eos would win over config.json's
    _fails_cleanly(capsys, ckpt, tmp_path, "config.json", fragment)


@pytest.mark.parametrize("changes,fragment", [
    ({"eos_token_id": "x"}, "'eos_token_id' must be a token id"),
    ({"bos_token_id": [1, 2]}, "'bos_token_id' must be a token id"),
    ({"eos_token_id": [1, "a"]}, "'eos_token_id' must be a token id"),
    ({"do_sample": "yes"}, "'do_sample' must be true or false"),
    ({"temperature": float("nan")}, "'temperature' is nan"),
])
def test_bad_generation_config(changes, fragment, ckpt, tmp_path, capsys):
    _edit_json(ckpt / "generation_config.json", **changes)
    _fails_cleanly(capsys, ckpt, tmp_path, "generation_config.json", fragment)


def test_overlapping_data_offsets(ckpt, tmp_path, capsys):
    header = {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}
    _write_raw_safetensors(ckpt / "model.safetensors", json.dumps(header).encode(), bytes(24))
    _fails_cleanly(capsys, ckpt, tmp_path, "model.safetensors is corrupt", "'a'", "'b'", "overlap")


def test_duplicate_tensor_name_in_a_header(ckpt, tmp_path, capsys):
    entry = '{"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}'
    header = f'{{"w": {entry}, "w": {entry}}}'.encode()
    _write_raw_safetensors(ckpt / "model.safetensors", header, bytes(16))
    _fails_cleanly(capsys, ckpt, tmp_path, "model.safetensors", "'w' appears twice")


def test_integer_data_for_a_float_weight(ckpt, tmp_path, capsys):
    tensors = _tensors(ckpt)
    tensors[WEIGHT] = tensors[WEIGHT].astype(np.int64)
    write_safetensors(str(ckpt / "model.safetensors"), tensors)
    _fails_cleanly(capsys, ckpt, tmp_path, f"'{WEIGHT}' holds int64 data")


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_weights_warn_and_build(value, ckpt, tmp_path, caplog):
    tensors = _tensors(ckpt)
    tensors[WEIGHT][0, 0] = value
    write_safetensors(str(ckpt / "model.safetensors"), tensors)
    assert main(["build", "-q", "--model", str(ckpt), str(tmp_path / "out")]) == 0
    assert f"tensor '{WEIGHT}' holds NaN or Inf values" in caplog.text


@pytest.mark.parametrize("value, source, dtype", [(1e300, np.float64, "f32"),
                                                  (7e4, np.float32, "f16")])
def test_a_weight_that_overflows_the_package_dtype_is_refused(value, source, dtype, ckpt,
                                                                tmp_path, capsys):
    tensors = _tensors(ckpt)
    tensors[WEIGHT] = tensors[WEIGHT].astype(source)
    tensors[WEIGHT][1, 2] = value
    write_safetensors(str(ckpt / "model.safetensors"), tensors)
    _fails_cleanly(capsys, ckpt, tmp_path, f"tensor '{WEIGHT}' holds {value:.4g}",
                   f"beyond the range of {dtype}", extra=("--dtype", dtype))


def test_a_quant_override_that_matches_nothing_is_refused(ckpt, tmp_path, capsys):
    _fails_cleanly(capsys, ckpt, tmp_path, "--quant-override layers.0.mlp.up_prj=float",
                   "matches no weight", "closest layer names: layers.0.mlp.up_proj",
                   extra=("--quant", "int4", "--quant-override", "layers.0.mlp.up_prj=float"))


def test_an_unused_token_id_outside_the_vocabulary_warns_and_builds(tmp_path, caplog):
    bert = make_tiny_checkpoint("tiny-bert", str(tmp_path / "bert"))
    _edit_json(os.path.join(bert, "config.json"), bos_token_id=10**6)
    assert main(["build", "-q", "--model", bert, str(tmp_path / "out")]) == 0
    assert "'bos_token_id' is 1000000, outside the vocabulary" in caplog.text


def _project(folder):
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "important.py").write_text("print('keep')")
    (folder / "notes.txt").write_text("mine")


@pytest.mark.parametrize("spelling", ["path", "dot"])
def test_overwrite_never_deletes_a_users_folder(spelling, ckpt, tmp_path, capsys, monkeypatch):
    """Refused before any weight is read: the checkpoint's weights here are garbage."""
    (ckpt / "model.safetensors").write_bytes(b"garbage")
    proj = tmp_path / "proj"
    _project(proj)
    before = file_contents(proj)
    if spelling == "dot":
        monkeypatch.chdir(proj)
    code = main(["build", "-q", "--model", str(ckpt), "--overwrite",
                 "." if spelling == "dot" else str(proj)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and lines == [
        f"mobius: error: output folder {proj} holds 2 file(s) or folder(s) that no mobius build "
        f"wrote (notes.txt, src/); refusing to replace it"], lines
    assert file_contents(proj) == before and sorted(os.listdir(tmp_path)) == ["ckpt", "proj"]


def test_overwrite_keeps_a_file_the_user_added_to_a_package(ckpt, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["build", "-q", "--model", str(ckpt), str(out)]) == 0
    (out / "my_eval.py").write_text("keep")
    code = main(["build", "-q", "--model", str(ckpt), "--overwrite", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "is a mobius package, but holds 1 file(s)" in err and "(my_eval.py)" in err
    assert (out / "my_eval.py").read_text() == "keep"


# ---------------------------------------------------------------------------
# Smaller: each one line naming the file
# ---------------------------------------------------------------------------


def test_undecodable_config_names_the_file(ckpt, tmp_path, capsys):
    (ckpt / "config.json").write_bytes(b'{"model_type": "\xff\xfe"}')
    _fails_cleanly(capsys, ckpt, tmp_path, "config.json is not valid UTF-8")


@pytest.mark.parametrize("target", ["config.json", "model.safetensors",
                                    "model.safetensors.index.json"])
def test_deep_nesting_is_one_line(target, ckpt, tmp_path, capsys):
    deep = b"[" * 200_000 + b"]" * 200_000
    if target == "model.safetensors":
        _write_raw_safetensors(ckpt / target, deep, b"")
    else:
        (ckpt / target).write_bytes(deep)
    _fails_cleanly(capsys, ckpt, tmp_path, target, "nested too deeply")


@pytest.mark.parametrize("where", ["same", "inside", "parent"])
def test_output_overlapping_the_checkpoint_is_refused(where, ckpt, tmp_path, capsys):
    out = {"same": ckpt, "inside": ckpt / "pkg", "parent": tmp_path}[where]
    before = file_contents(ckpt)
    code = main(["build", "-q", "--model", str(ckpt), str(out), "--overwrite"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "the input checkpoint" in err[0], err
    assert file_contents(ckpt) == before


@pytest.mark.parametrize("delay", [0.4, 0.7, 1.0, 1.5, 2.0])
def test_ctrl_c_at_any_moment_is_one_line(delay, base, tmp_path):
    """From the first line of mobius' code on (Python's own startup is out of reach: the
    delay counts from the end of an interpreter start timed just before, under the same
    load, so a busy machine does not land the signal before mobius runs)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    startup = time.monotonic() - started
    child = subprocess.Popen([sys.executable, "-m", "mobius", "build", "-q", "--model", base,
                              str(tmp_path / "out")], env={**os.environ, "PYTHONPATH": ROOT},
                             stderr=subprocess.PIPE, text=True)
    time.sleep(startup + delay)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    if child.returncode == 0:  # finished before the signal: nothing to check
        return
    # 130, or -SIGINT where CPython re-raises the signal at exit after our handler ran
    assert child.returncode in (130, -signal.SIGINT) and err.strip().splitlines() == [
        "mobius: interrupted; nothing was written"], err
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------------------
# Resource bombs: refused before anything is allocated (child under a 3 GiB limit)
# ---------------------------------------------------------------------------

BOMBS = {
    "layers": ({"num_hidden_layers": 10**9}, "'num_hidden_layers' is 1000000000"),
    "hidden": ({"hidden_size": 4 * 10**11}, "'hidden_size' is 400000000000"),
    "positions": ({"max_position_embeddings": 10**9}, "'max_position_embeddings' is 1000000000"),
    "heads": ({"num_attention_heads": 2**30, "num_key_value_heads": 1},
              "'num_attention_heads'"),
}


@pytest.fixture(scope="module")
def server():
    """mobius imported once; each bomb's build runs in a fork of it under the memory limit
    (no interpreter start and mobius import per bomb)."""
    with ForkServer(memory_bytes=3 << 30) as server:
        yield server


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_resource_bomb_fails_fast(bomb, ckpt, tmp_path, server):
    changes, fragment = BOMBS[bomb]
    _edit_json(ckpt / "config.json", **changes)
    started = time.monotonic()
    result = server.run(["build", "-q", "--model", str(ckpt), str(tmp_path / "out")],
                        timeout=120)
    lines = result.output.strip().splitlines()  # stdout + stderr: -q prints nothing else
    assert result.code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith("mobius: error: config.json") and fragment in lines[0]
    assert time.monotonic() - started < 60
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]
