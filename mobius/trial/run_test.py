"""``mobius run``: a decoder streams the tokens transformers' greedy generate gives, with
and without the chat template; a classifier prints transformers' pipeline labels; the
errors name what is wrong. transformers' side: trial_cases.py, run at build time."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import mobius
from mobius.cli import main
from mobius.package.manifest import MANIFEST
from mobius.trial import trial_cases
from testing.reference_cases import case_dir


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("packages")
    out = {}
    for case in trial_cases.CASES:
        out[case] = str(root / case)
        mobius.build(os.path.join(case_dir(trial_cases, case), "ckpt")).save(out[case])
    return out


def _expected(case: str) -> dict:
    with open(os.path.join(case_dir(trial_cases, case), "expected.json")) as f:
        return json.load(f)


def _run(capsys, *args) -> tuple[int, str, str]:
    code = main(["run", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("template", ["chat", "raw"])
def test_decoder_generates_transformers_greedy_tokens(packages, capsys, template):
    flags = [] if template == "chat" else ["--no-chat-template"]
    code, out, _ = _run(capsys, packages["llama"], "--prompt", trial_cases.PROMPT, "--json",
                        "--max-new-tokens", str(trial_cases.NEW_TOKENS), *flags)
    assert code == 0
    result = json.loads(out)
    want = _expected("llama")[template]
    assert result["prompt_ids"] == want["prompt_ids"]
    assert result["new_ids"] == want["new_ids"]


def test_decoder_streams_the_text(packages, capsys):
    args = [packages["llama"], "--prompt", trial_cases.PROMPT, "--max-new-tokens", "5"]
    code, streamed, _ = _run(capsys, *args)
    assert code == 0
    _, out, _ = _run(capsys, *args, "--json")
    assert streamed == json.loads(out)["text"] + "\n"


def test_classifier_prints_transformers_labels(packages, capsys):
    code, out, _ = _run(capsys, packages["bert-seq-cls"], "--prompt", trial_cases.PROMPT,
                        "--json")
    assert code == 0
    want = _expected("bert-seq-cls")["labels"]
    want = want[0] if isinstance(want[0], list) else want  # pipeline nests one input's list
    got = json.loads(out)["labels"]
    assert [r["label"] for r in got] == [r["label"] for r in want]
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in want], abs=1e-5)
    code, out, _ = _run(capsys, packages["bert-seq-cls"], "--prompt", trial_cases.PROMPT)
    assert out.split("\n")[0].split() == [f"{got[0]['score']:.4f}", got[0]["label"]]


def test_embedder_prints_transformers_hidden_states(packages, capsys):
    code, out, _ = _run(capsys, packages["bert"], "--prompt", trial_cases.PROMPT, "--json")
    assert code == 0
    got, want = json.loads(out), _expected("bert")
    assert list(got) == ["last_hidden_state"]
    got, want = got["last_hidden_state"], want["last_hidden_state"]
    assert got["shape"] == want["shape"]
    assert got["values"] == pytest.approx(want["values"], abs=1e-4)
    code, out, _ = _run(capsys, packages["bert"], "--prompt", trial_cases.PROMPT)
    first = " ".join(f"{x:.4f}" for x in got["values"][:8])
    assert out == f"last_hidden_state {got['shape']}: {first} ...\n"


def test_fill_mask_prints_transformers_candidates(packages, capsys):
    code, out, _ = _run(capsys, packages["bert-mlm"], "--prompt", trial_cases.MASKED, "--json")
    assert code == 0
    got, want = json.loads(out)["candidates"], _expected("bert-mlm")["candidates"]
    assert [c["id"] for c in got] == [c["id"] for c in want]
    assert [c["score"] for c in got] == pytest.approx([c["score"] for c in want], abs=1e-5)
    code, _, err = _run(capsys, packages["bert-mlm"], "--prompt", trial_cases.PROMPT)
    assert code == 1 and "must hold the mask token [MASK]" in err


def test_not_a_package(tmp_path, capsys):
    code, _, err = _run(capsys, str(tmp_path), "--prompt", "x")
    assert code == 1 and "is not a mobius package" in err
    code, _, err = _run(capsys, str(tmp_path / "absent"), "--prompt", "x")
    assert code == 1 and "is not a folder" in err


def test_missing_file(packages, tmp_path, capsys):
    broken = str(tmp_path / "pkg")
    shutil.copytree(packages["bert-seq-cls"], broken)
    os.remove(os.path.join(broken, "model.onnx.data"))
    code, _, err = _run(capsys, broken, "--prompt", "x")
    assert code == 1 and "missing 1 file(s)" in err and "model.onnx.data" in err


def test_a_task_run_cannot_run(packages, tmp_path, capsys):
    other = str(tmp_path / "pkg")
    shutil.copytree(packages["bert-seq-cls"], other)
    _edit_manifest(other, lambda m: m["build"].update(task="automatic-speech-recognition"))
    code, _, err = _run(capsys, other, "--prompt", "x")
    assert code == 1
    assert "cannot run a automatic-speech-recognition package" in err
    assert "onnxruntime-genai" in err


def test_a_decoder_without_genai_config(packages, tmp_path, capsys):
    other = str(tmp_path / "pkg")
    shutil.copytree(packages["llama"], other)
    os.remove(os.path.join(other, "genai_config.json"))
    _edit_manifest(other, lambda m: m["files"].remove("genai_config.json"))
    code, _, err = _run(capsys, other, "--prompt", "x")
    assert code == 1 and "has no genai_config.json; build it with --layout genai" in err


def _edit_manifest(folder, change):
    path = os.path.join(folder, MANIFEST)
    with open(path) as f:
        manifest = json.load(f)
    change(manifest)
    with open(path, "w") as f:
        json.dump(manifest, f)


def test_build_ends_with_the_line_that_tries_it(packages, tmp_path, capsys):
    ckpt = os.path.join(case_dir(trial_cases, "llama"), "ckpt")
    assert main(["build", "--model", ckpt, str(tmp_path / "pkg")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == (f"try it: mobius run {tmp_path / 'pkg'} --prompt Hello; "
                    f"check it: mobius verify {tmp_path / 'pkg'}")
