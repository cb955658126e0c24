"""Containment by name: hub-cache blob links are followed, links out of the checkpoint are refused."""

from __future__ import annotations

import filecmp
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import mobius
from mobius.checkpoint_files import contained_file
from mobius.errors import MobiusError, WeightsError
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.weights.safetensors_checkpoint import INDEX_FILE, SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_sharded
from testing.hub_cache import hub_repo_folder, make_hub_cache

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sharded_checkpoint(folder: str) -> str:
    make_tiny_checkpoint("tiny-llama", folder)
    checkpoint = SafetensorsCheckpoint(folder)
    items = [(n, np.array(checkpoint.read(n))) for n in checkpoint.names()]
    del checkpoint
    os.remove(os.path.join(folder, "model.safetensors"))
    write_sharded(folder, items, 2)
    return folder


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """(cache folder, snapshot folder, the same checkpoint as plain files)."""
    root = tmp_path_factory.mktemp("hub")
    plain = _sharded_checkpoint(str(root / "plain"))
    snapshot = make_hub_cache(str(root / "cache"), "org/tiny-sharded", plain)
    return str(root / "cache"), snapshot, plain


def test_the_cache_is_laid_out_like_the_hub(hub):
    _, snapshot, _ = hub
    link = os.path.join(snapshot, "model-00001-of-00002.safetensors")
    assert os.path.islink(link) and os.readlink(link).startswith("../../blobs/")


def test_sharded_snapshot_folder_builds_like_plain_files(hub, tmp_path):
    _, snapshot, plain = hub
    mobius.build(snapshot).save(str(tmp_path / "hub"))
    mobius.build(plain).save(str(tmp_path / "plain"))
    for name in ("model.onnx.data", "genai_config.json", "tokenizer.json"):
        assert filecmp.cmp(tmp_path / "hub" / name, tmp_path / "plain" / name, shallow=False)
    assert not os.path.islink(tmp_path / "hub" / "tokenizer.json")  # the bytes, not the link


def test_snapshot_reached_through_a_link_builds(hub, tmp_path):
    _, snapshot, _ = hub
    os.symlink(snapshot, tmp_path / "model")
    mobius.build(str(tmp_path / "model")).save(str(tmp_path / "out"))
    assert "model.onnx" in os.listdir(tmp_path / "out")


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME"])
def test_sharded_hub_id_builds_offline(hub, tmp_path, variable):
    cache, _, _ = hub
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_OFFLINE="1", PYTHONPATH=_ROOT)
    if variable == "HF_HOME":  # the hub's default cache: $HF_HOME/hub
        os.symlink(cache, tmp_path / "hub")
        env["HF_HOME"] = str(tmp_path)
    else:
        env["HF_HUB_CACHE"] = cache
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "mobius", "build", "-q", "--model",
                             "org/tiny-sharded", str(out)], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert {"model.onnx", "model.onnx.data", "tokenizer.json"} <= set(os.listdir(out))


def _outside_file(tmp_path, content=b"secret\n") -> str:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir()
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize("name", ["../model.safetensors", "/etc/passwd", "a/../../x.safetensors",
                                  "", "a\0b"])
def test_index_names_outside_the_folder_are_refused(tmp_path, name):
    with pytest.raises(WeightsError, match="index.json|invalid file"):
        contained_file(str(tmp_path), name, INDEX_FILE, WeightsError)


def test_shard_link_out_of_the_checkpoint_is_refused(hub, tmp_path):
    _, _, plain = hub
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name in os.listdir(plain):
        os.symlink(os.path.join(plain, name), folder / name)  # every file links elsewhere
    with pytest.raises(MobiusError, match="leads outside the checkpoint folder"):
        mobius.build(str(folder))


def test_link_into_another_repos_blobs_is_refused(hub, tmp_path):
    cache, _, plain = hub
    snapshot = make_hub_cache(str(tmp_path / "cache"), "org/other", plain)
    shard = os.path.join(snapshot, "model-00001-of-00002.safetensors")
    target = os.path.realpath(shard)
    os.remove(shard)  # now points into org/tiny-sharded's blobs instead of its own
    foreign = os.path.join(hub_repo_folder(cache, "org/tiny-sharded"), "blobs",
                           os.path.basename(target))
    os.symlink(os.path.relpath(foreign, snapshot), shard)
    with pytest.raises(WeightsError, match="leads outside the checkpoint folder"):
        SafetensorsCheckpoint(snapshot)


@pytest.mark.parametrize("name", ["tokenizer.json", "merges.txt", "config.json"])
def test_file_linked_out_of_the_checkpoint_is_not_read(tmp_path, name):
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    path = os.path.join(folder, name)
    if os.path.exists(path):
        os.remove(path)
    os.symlink(_outside_file(tmp_path), path)
    with pytest.raises(MobiusError, match=f"'{name}'.*leads outside the checkpoint folder"):
        mobius.build(folder).save(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_folder_named_like_a_tokenizer_file_is_refused(tmp_path):
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    os.remove(os.path.join(folder, "tokenizer.json"))
    os.mkdir(os.path.join(folder, "tokenizer.json"))
    with pytest.raises(MobiusError, match="not a regular file"):
        mobius.build(folder)


def test_invalid_json_tokenizer_warns(tmp_path, caplog):
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        f.write("{not json")
    with caplog.at_level(logging.WARNING):
        mobius.build(folder)
    assert any("tokenizer.json is not valid JSON" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("inside", ["blobs", "refs", "."])
def test_output_in_the_hub_repo_of_the_snapshot_is_refused(hub, inside):
    from mobius.errors import OutputError
    from mobius.package.overlap import check_no_overlap

    cache, snapshot, _ = hub
    out = os.path.join(hub_repo_folder(cache, "org/tiny-sharded"), inside)
    with pytest.raises(OutputError, match="the input checkpoint"):
        check_no_overlap(out, snapshot)
