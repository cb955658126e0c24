"""OLMoE, GraniteMoE, PhiMoE and gpt-oss: L1 builds for every EP, L3 parity vs transformers per switch.

* L1: each family builds for every built-in EP and every dtype it accepts;
  the MoE blocks are one com.microsoft MoE each exactly where the EP has the
  kernel (``caps.fuses_moe(dtype)``), the decomposed routing everywhere else;
  PhiMoE's SparseMixer routing is built in the form the kernel fuses
  (mobius/components/chosen_routing.py).
* L3: f32 logits match transformers within 1e-4 over a left-padded batch
  prefill + 3 greedy decode steps with the KV cache, on the default and cpu
  EPs, for the presets and for each config switch the families read.
* The cuda graphs (fused MoE) run on onnxruntime's CPU EP MoE kernel.
* The checkpoints' biases (0 from transformers) are randomized.
* gpt-oss: its experts (stacked, biased, clamped SwiGLU) fuse into MoE too; its
  attention sinks matter: with large random sinks the logits still match, and a
  package of the same weights with the preset's small sinks does not.
"""

from __future__ import annotations


import onnx
import pytest

from mobius.builder import build
from mobius.errors import ConfigError
from mobius.ep.registry import ep_registry
from mobius.models import gpt_oss, granitemoe, olmoe, phimoe
from mobius.models import sparse_moe_families_cases as cases
from mobius.models.sparse_moe_families_cases import REJECTED, VARIANTS
from mobius.optimize.histogram import op_histogram
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype
from testing.model_runs import BuiltPackage, f32_parity
from testing.checkpoint_runs import checkpoint, reference
from testing.ep_suite import Builds, Checkpoints

FAMILIES = {f.name: f for f in (olmoe.FAMILY, granitemoe.FAMILY, phimoe.FAMILY, gpt_oss.FAMILY)}
FUSED = ("olmoe", "granitemoe", "phimoe", "gpt_oss")  # fused where the EP has the MoE kernel

MOE = "com.microsoft::MoE"


def _experts(config) -> int:
    return config.raw.get("num_local_experts") or config.raw["num_experts"]


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> Builds:
    """The EP suites' builds of the families' tiny presets: under Bazel the ``ep_builds``
    action made them once (//ep:suite_builds), elsewhere they are built here."""
    return Builds(Checkpoints(tmp_path_factory.mktemp("checkpoints")))


L1_CASES = [
    (family, caps.name, SHORT_NAMES[dtype])
    for family in FAMILIES
    for caps in ep_registry
    if caps.tasks is None or "text-generation" in caps.tasks
    for dtype in sorted(caps.dtypes, key=lambda d: SHORT_NAMES[d])
]


@pytest.mark.parametrize("family,ep,dtype", L1_CASES, ids=["-".join(c) for c in L1_CASES])
def test_builds_for_every_ep_with_fused_moe_where_the_ep_has_it(builds, family, ep, dtype):
    built = builds.get(family, ep, dtype)
    histogram = op_histogram(built.model)
    config = built.config
    caps = ep_registry.get(ep)
    layers = config.num_hidden_layers
    if family in FUSED and caps.fuses_moe(parse_dtype(dtype)):
        assert histogram[MOE] == layers, histogram
        assert not histogram.get("NonZero") and not histogram.get("ScatterND"), histogram
    else:
        assert not histogram.get(MOE), histogram
        assert histogram["NonZero"] == histogram["ScatterND"] == layers * _experts(config)
    onnx.checker.check_model(built.onnx_bytes(), full_check=True)


def _parity(folder, tmp_path, ep, ref, *, steps=3):
    """``folder`` built for ``ep`` (f32) against transformers' recorded run ``ref``."""
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(tmp_path / ep), overwrite=True)
    return f32_parity(BuiltPackage(path, package.config, "f32"), ref, steps=steps), package


PARITY_CASES = [(v, ep) for v in sorted(VARIANTS) for ep in ("default", "cpu")]


@pytest.mark.parametrize("variant,ep", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_transformers(tmp_path, variant, ep):
    """Left-padded batch prefill + 3 decode steps, <= 1e-4 (cpu: GQA, padded prefill
    only when its kernel applies RoPE, as in moe_families_test)."""
    folder = checkpoint(cases, variant)
    run, package = _parity(folder, tmp_path / "a", ep, reference(cases, variant, "unpadded"))
    assert run.max_abs_diff <= 1e-4, f"{variant}/{ep} unpadded: {run.max_abs_diff:.3g}"
    fused_rotary = any(n.op_type == "GroupQueryAttention" and n.attributes.get("do_rotary")
                       is not None and n.attributes["do_rotary"].value == 1
                       for n in package.models["model"].graph)
    padded, _ = _parity(folder, tmp_path / "b", ep, reference(cases, variant, "padded"),
                        steps=0 if fused_rotary else 3)
    assert padded.max_abs_diff <= 1e-4, f"{variant}/{ep} left-padded: {padded.max_abs_diff:.3g}"


@pytest.mark.parametrize("family", FUSED + ("phimoe_jitter_window_no_bias",))
def test_cuda_graph_with_fused_moe_matches_transformers_on_the_cpu_ep(tmp_path, family):
    run, package = _parity(checkpoint(cases, family), tmp_path, "cuda",
                           reference(cases, family, "unpadded"))
    assert op_histogram(package.models["model"])[MOE] == package.config.num_hidden_layers
    assert run.max_abs_diff <= 1e-4, f"{family}/cuda f32: {run.max_abs_diff:.3g}"


def test_olmoe_clip_qkv_is_rejected_before_building():
    _, _, match = REJECTED["olmoe_clip_qkv"]
    with pytest.raises(ConfigError, match=match):
        build(checkpoint(cases, "olmoe_clip_qkv"), execution_provider="default")


@pytest.mark.parametrize("case", ["phimoe_top3", "phimoe_longrope_mscale"])
def test_phimoe_unsupported_switches_are_rejected_before_building(tmp_path, case):
    _, _, match = REJECTED[case]
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=match):
        build(checkpoint(cases, case), execution_provider="default").save(str(out))
    assert not out.exists()


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_gpt_oss_large_sinks_match_and_matter(tmp_path, ep):
    """gpt-oss with large random sinks (cases.LARGE_SINKS) matches transformers; the same
    weights with the preset's small sinks do not."""
    large = reference(cases, "gpt_oss_large_sinks", "unpadded")
    package = build(checkpoint(cases, "gpt_oss_large_sinks"), execution_provider=ep,
                    dtype="f32", prefill_logits="all")
    path = package.save(str(tmp_path / "pkg"), overwrite=True)
    sinks_op = "com.microsoft::GroupQueryAttention" if ep == "cpu" else "Attention"
    assert op_histogram(package.models["model"])[sinks_op] == package.config.num_hidden_layers
    run = f32_parity(BuiltPackage(path, package.config, "f32"), large, steps=3)
    assert run.max_abs_diff <= 1e-4, f"gpt_oss large sinks/{ep}: {run.max_abs_diff:.3g}"
    small = build(checkpoint(cases, "gpt_oss"), execution_provider=ep, dtype="f32",
                  prefill_logits="all")
    small_path = small.save(str(tmp_path / "small"), overwrite=True)
    other = f32_parity(BuiltPackage(small_path, small.config, "f32"), large, steps=3)
    assert other.max_abs_diff > 1e-3, f"the sinks change nothing ({other.max_abs_diff:.3g})"
