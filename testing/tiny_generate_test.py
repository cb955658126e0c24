"""//testing:tiny_generate as Bazel runs it: one-shot, and as a persistent worker over its real
stdin/stdout protocol. A worker's checkpoints are byte-identical to one-shot runs, whatever
ran before them in the same process, and a bad request fails alone."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Different families and processors (audio features vs a BPE tokenizer), so a leak of
# RNG or registry state from the first request would show in the second.
_FIRST, _SECOND = "tiny-whisper", "tiny-llama"


def _generate(*argv: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": _ROOT}
    return subprocess.run([sys.executable, "-m", "testing.tiny_generate", *argv], input=stdin,
                          cwd=_ROOT, env=env, capture_output=True, timeout=300)


def _assert_same_tree(left, right):
    names = sorted(os.listdir(left))
    assert names == sorted(os.listdir(right)) and "model.safetensors" in names
    match, mismatch, errors = filecmp.cmpfiles(left, right, names, shallow=False)
    assert (mismatch, errors) == ([], []), f"{left} vs {right}"


def test_worker_writes_what_one_shot_runs_write(tmp_path):
    for preset in (_FIRST, _SECOND):  # the references: one fresh process each
        flagfile = tmp_path / f"{preset}.args"  # as Bazel calls it: PRESET OUT in a param file
        flagfile.write_text(f"{preset}\n{tmp_path / 'one-shot' / preset}\n")
        result = _generate(f"@{flagfile}")
        assert result.returncode == 0 and result.stdout == b"", result.stderr.decode()
    requests = [
        {"arguments": [_FIRST, str(tmp_path / "worker" / _FIRST)]},
        {"arguments": ["tiny-nope", str(tmp_path / "worker" / "nope")]},
        {"arguments": [_SECOND]},
        {"arguments": [_SECOND, str(tmp_path / "worker" / _SECOND)]},
    ]
    result = _generate("--persistent_worker",
                       stdin="".join(json.dumps(r) for r in requests).encode())
    assert result.returncode == 0, result.stderr.decode()
    responses = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert [r["exitCode"] for r in responses] == [0, 1, 2, 0]
    assert responses[1]["output"].startswith("mobius: error: unknown tiny model 'tiny-nope'")
    assert responses[2]["output"].startswith("usage: ")
    assert sorted(os.listdir(tmp_path / "worker")) == sorted([_FIRST, _SECOND])  # no "nope"
    for preset in (_FIRST, _SECOND):
        _assert_same_tree(tmp_path / "worker" / preset, tmp_path / "one-shot" / preset)


def test_one_shot_bad_preset_is_one_line_and_writes_nothing(tmp_path):
    result = _generate("tiny-nope", str(tmp_path / "out"))
    assert result.returncode == 1 and result.stdout == b""
    assert result.stderr.decode().count("\n") == 1
    assert result.stderr.decode().startswith("mobius: error: unknown tiny model 'tiny-nope'")
    assert os.listdir(tmp_path) == []
