"""Inside shared_construction, builds of one checkpoint for several EPs construct its
generic graphs once per (dtype, structural flags) and run the pipeline's cleanup once, and
each package is the package a lone build makes: graphs, weights, configs and warnings, byte
for byte up to the numbering of node names the EP's rules generate."""

from __future__ import annotations

import warnings

import onnx
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


def test_a_lazy_weight_is_computed_once_per_key_and_every_clone_reads_it():
    loads = []

    def load():
        loads.append(1)
        return ir.tensor([1.0, 2.0], name="w")

    def construct():
        weight = ir.Value(name="w", const_value=ir.LazyTensor(load, ir.DataType.FLOAT,
                                                                ir.Shape([2])))
        graph = ir.Graph([], [weight], nodes=[], initializers=[weight], name="g")
        return "module", {"model": ir.Model(graph, ir_version=10)}

    with shared_construction():
        for _ in range(3):
            model = constructed(("ckpt", "f32"), construct)[1]["model"]
            assert model.graph.initializers["w"].const_value.numpy().tolist() == [1.0, 2.0]
    assert len(loads) == 1
    constructed(("ckpt", "f32"), construct)[1]["model"].graph.initializers["w"].const_value.numpy()
    assert len(loads) == 2  # outside the context: a lone build keeps nothing


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


def test_prepare_runs_once_per_key_and_only_when_shared():
    prepared = []
    construct = lambda: ("module", {})  # noqa: E731
    prepare = lambda models: prepared.append(1) or "cleaned"  # noqa: E731
    assert constructed(("ckpt", "f32"), construct, prepare)[2] is None  # a lone build
    with shared_construction():
        results = [constructed(("ckpt", "f32"), construct, prepare)[2] for _ in range(3)]
    assert results == ["cleaned"] * 3 and len(prepared) == 1


def test_shared_builds_run_the_cleanup_stage_once_per_construction(checkpoint, monkeypatch):
    from mobius.optimize import pipeline

    runs = []
    clean_up = pipeline.clean_up
    monkeypatch.setattr(builder, "clean_up", lambda model: runs.append(1) or clean_up(model))
    with shared_construction():
        for target in TARGETS[:4]:  # f32: default, cpu, webgpu (its own construction), ...
            build(checkpoint, *target)
    assert len(runs) == 2  # one graph, two constructions


def _without_node_names(package) -> tuple:
    models, genai, extra = package_bytes(package)
    renamed = {}
    for key, data in models.items():
        proto = onnx.ModelProto.FromString(data)
        for node in proto.graph.node:
            node.name = ""
        renamed[key] = proto.SerializeToString(deterministic=True)
    return renamed, genai, extra


def test_a_shared_build_differs_from_a_lone_one_in_generated_node_names_only(tmp_path):
    """Falcon-H1 on cpu: the rules name new nodes from the clone's fresh counters."""
    from mobius.tiny.checkpoint import make_tiny_checkpoint

    folder = make_tiny_checkpoint("tiny-falcon_h1", str(tmp_path / "falcon_h1"))
    lone = mobius.build(folder, execution_provider="cpu")
    with shared_construction():
        mobius.build(folder, execution_provider="default")
        shared = mobius.build(folder, execution_provider="cpu")
    assert _without_node_names(shared) == _without_node_names(lone)
