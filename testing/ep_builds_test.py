"""The stored form of the EP suites' builds (testing/ep_builds.py): what a test loads is
what was built, a failed build fails only the tests that ask for it, and a build the
action never made is an error, not a silent in-process rebuild."""

from __future__ import annotations

import types

import onnx
import onnx_ir as ir
import pytest

from testing import ep_builds, ep_suite
from testing.ep_suite import Builds, Checkpoints


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    builds = Builds(Checkpoints(tmp_path_factory.mktemp("checkpoints")))
    return builds.get("llama", "cpu", "f32")


def _stored(built, tmp_path) -> ep_builds.Archive:
    path = str(tmp_path / f"cpu{ep_builds.SUFFIX}")
    with ep_builds.ArchiveWriter(path) as writer:
        writer.write(built, "llama", "f32", None)
    return ep_builds.Archive(path)


def test_a_stored_build_loads_as_built(built, tmp_path):
    archive = _stored(built, tmp_path)
    assert archive.holds("llama", "f32", None) and not archive.holds("llama", "f16", None)
    loaded = archive.read("llama", "f32", None)
    assert (loaded.family, loaded.ep, loaded.dtype, loaded.quant) == ("llama", "cpu", "f32", None)
    assert loaded.warnings == built.warnings
    assert loaded.config.num_hidden_layers == built.config.num_hidden_layers
    assert list(loaded.models) == list(built.models)
    assert loaded.histogram == built.histogram
    assert loaded.onnx_bytes() == built.onnx_bytes()
    initializers = {n: v.const_value.numpy().tobytes()
                    for n, v in built.model.graph.initializers.items()}
    assert {n: v.const_value.numpy().tobytes()
            for n, v in loaded.model.graph.initializers.items()} == initializers


def test_a_failed_build_raises_its_own_message(tmp_path):
    path = str(tmp_path / f"cpu{ep_builds.SUFFIX}")
    with ep_builds.ArchiveWriter(path) as writer:
        writer.write_error("llama", "f16", None, "ValueError: no f16 today\n")
    archive = ep_builds.Archive(path)
    assert archive.holds("llama", "f16", None) and archive.failed("llama", "f16", None)
    with pytest.raises(ep_builds.BuildFailed, match="no f16 today"):
        archive.read("llama", "f16", None)


def test_a_build_missing_from_the_action_is_an_error(built, tmp_path, monkeypatch):
    archive = _stored(built, tmp_path)
    monkeypatch.setattr(ep_builds, "prebuilt_archives", lambda ep: [archive])
    builds = Builds(Checkpoints(tmp_path / "checkpoints"))
    assert builds.get("llama", "cpu", "f32").onnx_bytes() == built.onnx_bytes()
    with pytest.raises(KeyError, match="write_ep_builds.suite_keys"):
        builds.get("llama", "cpu", "bf16")
    assert not (tmp_path / "checkpoints").exists()  # no checkpoint made, nothing built here


def test_built_models_parse_lazily_from_the_stored_bytes(built, tmp_path):
    loaded = _stored(built, tmp_path).read("llama", "f32", None)
    assert loaded.package.models == {}  # onnxruntime needs only the bytes
    assert isinstance(loaded.model, ir.Model)
    assert ep_suite.op_histogram(loaded.model) == built.histogram


def test_the_main_model_is_the_decoder_whatever_was_serialized_first():
    """onnx_bytes() is the "model" key's even after another model's bytes were asked for."""
    def graph_model(name: str) -> ir.Model:
        return ir.Model(ir.Graph([], [], nodes=[], name=name), ir_version=10)

    package = types.SimpleNamespace(models={"vision": graph_model("v"), "model": graph_model("m")})
    built = ep_suite.Built("vlm", "cpu", "f32", package, [])
    built.onnx_bytes("vision")
    assert onnx.ModelProto.FromString(built.onnx_bytes()).graph.name == "m"
    assert built.model.graph.name == "m"
