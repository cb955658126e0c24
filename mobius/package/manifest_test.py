"""``overwrite=True`` replaces an empty folder or a mobius package, never a user's folder."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import onnx_ir as ir
import pytest

from mobius.errors import OutputError
from mobius.package.manifest import MANIFEST, read_build, write_manifest
from mobius.package.model_package import ModelPackage
from testing.file_tree import file_contents


def _package(version: int) -> ModelPackage:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([512]))
    w = ir.Value(name="w", const_value=ir.tensor(np.full(512, version, np.float32), name="w"))
    add = ir.node("Add", [x, w], num_outputs=1)
    add.outputs[0].name = "y"
    graph = ir.Graph([x], add.outputs, nodes=[add], initializers=[w], opset_imports={"": 21})
    return ModelPackage(models={"model": ir.Model(graph, ir_version=10)},
                        genai_config={"version": version})


def _version(folder) -> int:
    with open(os.path.join(folder, "genai_config.json")) as f:
        return json.load(f)["version"]


def _files_only(out):
    (out / "notes.txt").write_text("mine")
    (out / "data.csv").write_text("1,2")


def _subfolders(out):
    (out / "src").mkdir()
    (out / "src" / "important.py").write_text("print('keep')")
    (out / "notes.txt").write_text("mine")


def _git_work_tree(out):
    subprocess.run(["git", "init", "-q", str(out)], check=True)
    (out / "README.md").write_text("project")


def _home_like(out):
    for name in (".bashrc", ".profile"):
        (out / name).write_text("export X=1")
    for name in ("Documents", "Downloads", ".cache"):
        (out / name).mkdir()
        (out / name / "file").write_text("x")


def _tokenizer_only(out):  # names a package has, but no model: not a package
    (out / "tokenizer.json").write_text("{}")
    (out / "config.json").write_text("{}")


def _symlink_to_a_model(out):
    (out / "model.onnx").symlink_to("/etc/hostname")


@pytest.mark.parametrize("make", [_files_only, _subfolders, _git_work_tree, _home_like,
                                  _tokenizer_only, _symlink_to_a_model])
def test_a_users_folder_is_never_replaced(tmp_path, make):
    out = tmp_path / "out"
    out.mkdir()
    make(out)
    before = file_contents(out)
    with pytest.raises(OutputError, match="no mobius build wrote.*refusing to replace it"):
        _package(1).save(str(out), overwrite=True)
    assert file_contents(out) == before
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_the_refusal_says_what_the_folder_holds(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _subfolders(out)
    with pytest.raises(OutputError) as e:
        ModelPackage.check_output(str(out), overwrite=True)
    assert str(e.value) == (f"output folder {out} holds 2 file(s) or folder(s) that no mobius "
                            f"build wrote (notes.txt, src/); refusing to replace it")


def test_a_package_is_replaced_and_lists_its_files(tmp_path):
    out = tmp_path / "out"
    _package(1).save(str(out))
    with open(out / MANIFEST) as f:
        assert json.load(f)["files"] == ["genai_config.json", "model.onnx", "model.onnx.data"]
    _package(2).save(str(out), overwrite=True)
    assert _version(out) == 2 and sorted(os.listdir(tmp_path)) == ["out"]


@pytest.mark.parametrize("user_file", ["notes.txt", "sub/notes.txt"])
def test_a_package_with_a_user_file_is_refused_naming_it(tmp_path, user_file):
    out = tmp_path / "out"
    _package(1).save(str(out))
    (out / user_file).parent.mkdir(exist_ok=True)
    (out / user_file).write_text("mine")
    shown = user_file.split("/")[0] + ("/" if "/" in user_file else "")
    with pytest.raises(OutputError, match=f"is a mobius package, but holds 1 .*\\({shown}\\)"):
        _package(2).save(str(out), overwrite=True)
    assert _version(out) == 1 and (out / user_file).read_text() == "mine"


def test_a_package_from_before_the_manifest_is_replaced(tmp_path):
    out = tmp_path / "out"
    _package(1).save(str(out))
    os.remove(out / MANIFEST)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (out / name).write_text("{}")
    (out / "onnx").mkdir()
    (out / "onnx" / "model_q4.onnx").write_text("")
    (out / "onnx" / "model_q4.onnx_data").write_text("")
    _package(2).save(str(out), overwrite=True)
    assert _version(out) == 2


def test_an_older_package_with_a_user_file_is_refused(tmp_path):
    out = tmp_path / "out"
    _package(1).save(str(out))
    os.remove(out / MANIFEST)
    (out / "train.py").write_text("mine")
    with pytest.raises(OutputError, match=r"holds 1 .*\(train.py\)"):
        _package(2).save(str(out), overwrite=True)


def test_an_empty_folder_is_replaced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _package(1).save(str(out), overwrite=True)
    assert _version(out) == 1


def test_a_user_file_added_during_the_build_is_still_refused(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _package(1).save(str(out))
    package = _package(2)
    write = package._write

    def write_then_user_adds_a_file(folder, progress):
        write(folder, progress)
        (out / "notes.txt").write_text("mine")

    monkeypatch.setattr(package, "_write", write_then_user_adds_a_file)
    with pytest.raises(OutputError, match=r"\(notes.txt\)"):
        package.save(str(out), overwrite=True)
    assert _version(out) == 1 and sorted(os.listdir(tmp_path)) == ["out"]


def test_the_build_record_reads_back(tmp_path):
    """What `mobius run` / `verify` read: the record as written; None without a task (a
    package saved before the record, or a foreign manifest)."""
    build = {"source": "/ckpt", "task": "fill-mask", "dtype": "f16", "quant": "int4",
             "layout": "genai"}
    write_manifest(str(tmp_path), build)
    assert read_build(str(tmp_path)) == build
    write_manifest(str(tmp_path))
    assert read_build(str(tmp_path)) is None
    (tmp_path / MANIFEST).write_text("[1, 2]")
    assert read_build(str(tmp_path)) is None
