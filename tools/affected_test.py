"""tools/affected.py's selection on this workspace's real build graph (read by tools/build_graph.py,
since Bazel cannot run inside a test): what a rule, model, EP or shared change selects."""

from __future__ import annotations

import os

import pytest

from mobius.ep.registry import ep_registry
from mobius.weights.dtypes import SHORT_NAMES
from tools.affected import Node, select
from tools.build_graph import BuildGraph

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def affected():
    graph = BuildGraph(ROOT)
    nodes = {t.label: Node(t.label, t.kind, t.tags, t.srcs, t.deps) for t in graph.targets.values()}
    return lambda *files: select(list(files), lambda f: graph.rdeps({f}), nodes)


def _suites(ep):
    return {f"//ep/{ep}:suite"}


def test_rule_change_selects_its_tests_and_the_ep_suites_not_other_families(affected):
    got = affected("//mobius/rewrite:bias_gelu.py")
    tests = set(got["tests"])
    assert "//mobius/rewrite:bias_gelu_test" in tests
    assert _suites("cpu") | _suites("webgpu") | _suites("cuda") <= tests
    for other in ("//mobius/models:whisper_test", "//mobius/models:llava_test",
                  "//mobius/rewrite:skip_layer_norm_test", "//mobius/rewrite:moe_fusion_test"):
        assert other not in tests, other
    assert got["families"] == []


def test_model_change_selects_its_family_not_others(affected):
    got = affected("//mobius/models:whisper.py")
    tests = set(got["tests"])
    assert {"//mobius/models:whisper_test", "//mobius/models:whisper_parity_test"} <= tests
    assert _suites("cpu") <= tests  # every EP suite builds every family
    assert "//mobius/models:llava_test" not in tests
    assert "//mobius/rewrite:bias_gelu_test" not in tests
    assert got["families"] == ["whisper"]


def test_base_family_change_reaches_the_families_built_on_it(affected):
    got = affected("//mobius/models:llama.py")
    assert {"llama", "mistral", "granite"} <= set(got["families"])
    assert "whisper" not in got["families"]
    assert "//mobius/models:whisper_test" not in got["tests"]


def test_ep_change_selects_that_ep_suite_only(affected):
    got = affected("//mobius/ep:webgpu.py")
    tests = set(got["tests"])
    assert _suites("webgpu") <= tests
    assert not (_suites("cpu") | _suites("cuda")) & tests
    assert got["eps"] == ["webgpu"]


def test_shared_change_selects_everything_that_depends_on_it(affected):
    got = affected("//mobius/components:attention.py")
    tests = set(got["tests"])
    assert _suites("cpu") | _suites("webgpu") <= tests
    assert {"//mobius/models:whisper_test", "//mobius/models:llava_test"} <= tests
    # bundled tests are chosen themselves, never the test_bundle() that also runs them
    assert "//mobius/models:tests" not in tests
    assert got["eps"] == sorted(d for d in os.listdir(os.path.join(ROOT, "ep"))
                                if os.path.isfile(os.path.join(ROOT, "ep", d, "BUILD.bazel")))


def test_unrelated_change_selects_nothing(affected):
    got = affected("//docs:eps.md")
    assert "//ep:docs_test" in got["tests"]
    assert not any(t.startswith("//ep/") for t in got["tests"])


def test_any_change_selects_the_tests_that_read_the_source_tree(affected):
    """They read every file (//:source_tree), whatever its scope: Bazel reruns them too."""
    for change in ("//mobius/models:whisper.py", "//mobius/ep:webgpu.py", "//docs:eps.md"):
        tests = set(affected(change)["tests"])
        assert {"//tools:deps_test", "//docs:adding_a_model_test"} <= tests, change


def test_ep_change_does_not_select_family_scoped_tests(affected):
    got = affected("//mobius/ep:webgpu.py")
    assert "//mobius/models:whisper_test" not in got["tests"]
    assert got["families"] == []


def test_packages_follow_the_family_and_ep_of_the_change(affected):
    assert affected("//mobius/models:whisper.py")["packages"] == sorted(
        f"//zoo:tiny-whisper-{caps.name}-{SHORT_NAMES[caps.primary_dtype]}"
        for caps in ep_registry  # not mlx, qnn: text generation only
        if caps.tasks is None or "automatic-speech-recognition" in caps.tasks)
    webgpu = affected("//mobius/ep:webgpu.py")["packages"]
    assert webgpu and all(p.endswith("-webgpu-f16") for p in webgpu)
    every_package = {t.label for t in BuildGraph(ROOT).targets.values()
                     if t.label.startswith("//zoo:") and t.kind == "mobius_package"}
    assert len(every_package) > 300  # every preset x EP, read from the real //zoo
    assert set(affected("//mobius/rewrite:bias_gelu.py")["packages"]) == every_package
