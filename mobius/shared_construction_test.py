"""Inside shared_construction, builds of one checkpoint for several EPs construct its
generic graphs once per (dtype, structural flags), and each package is byte for byte the
package a lone build makes: graphs, weights, configs and warnings."""

from __future__ import annotations

import warnings

import onnx_ir as ir
import pytest

import mobius
from mobius import builder
from mobius.shared_construction import constructed, shared_construction

#: f32 for four EPs (webgpu builds concrete dims: its own construction), f16, int4.
TARGETS = [("default", "f32", None), ("cpu", "f32", None), ("webgpu", "f32", None),
           ("onnx-standard", "f32", None), ("cuda", "f16", None), ("dml", "f16", None),
           ("cpu", "f32", "int4")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from mobius.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint("tiny-qwen3", str(tmp_path_factory.mktemp("ckpt") / "tiny-qwen3"))


def package_bytes(package) -> tuple:
    models = {k: ir.serde.serialize_model(m).SerializeToString(deterministic=True)
              for k, m in package.models.items()}
    return models, package.genai_config, package.extra_json


def build(checkpoint, ep, dtype, quant):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        package = mobius.build(checkpoint, execution_provider=ep, dtype=dtype, quant=quant)
    return package_bytes(package), [str(w.message) for w in caught]


def test_shared_builds_equal_lone_builds_and_construct_once_per_key(checkpoint, monkeypatch):
    lone = [build(checkpoint, *t) for t in TARGETS]
    calls = []
    construct = builder._construct
    monkeypatch.setattr(builder, "_construct", lambda *a: calls.append(a[2]) or construct(*a))
    with shared_construction():
        shared = [build(checkpoint, *t) for t in TARGETS]
    assert shared == lone
    assert len(calls) == 3  # f32, f32 with concrete dims (webgpu), f16


def test_construction_warnings_reach_every_build_and_models_are_clones():
    def construct():
        warnings.warn("odd config", UserWarning)
        return "module", {"model": ir.Model(ir.Graph([], [], nodes=[], name="g"), ir_version=10)}

    with shared_construction():
        seen = []
        for _ in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                seen.append(constructed(("ckpt", "f32"), construct))
            assert [str(w.message) for w in caught] == ["odd config"]
    assert seen[0][1]["model"] is not seen[1][1]["model"]
    assert seen[0][1]["model"].graph.name == seen[1][1]["model"].graph.name == "g"


def test_outside_the_context_or_without_a_key_each_build_constructs():
    calls = []
    construct = lambda: calls.append(1) or ("module", {})  # noqa: E731
    constructed(("ckpt", "f32"), construct)
    with shared_construction():
        constructed(None, construct)
        constructed(None, construct)
    assert len(calls) == 3


def test_a_new_checkpoint_drops_the_previous_ones_graphs():
    calls = []
    construct = lambda: calls.append(1) or ("module", {})  # noqa: E731
    with shared_construction():
        for folder in ("a", "b", "a"):
            constructed((folder, "f32"), construct)
    assert len(calls) == 3
