"""Mixtral, Qwen3-MoE and Qwen2-MoE: L1 builds for every EP, L3 parity vs transformers.

* L1: each family builds for every built-in EP and every dtype the EP accepts;
  the saved model passes the full ONNX checker. The MoE blocks are one
  com.microsoft MoE each exactly where the EP has the kernel
  (``caps.fuses_moe(dtype)``), the decomposed routing everywhere else.
* L3: f32 logits match transformers within 1e-4 over a left-padded batch
  prefill + 3 greedy decode steps with the KV cache (testing/parity.py).
* EP parity on onnxruntime's CPU EP, against transformers: the cpu graphs
  and the cuda graphs, f32 and f16 (a fused MoE runs on the CPU EP's MoE
  kernel in f32, through its function body in f16, which that kernel does not
  take). Graphs whose GroupQueryAttention applies RoPE itself are compared
  unpadded over every step and left-padded over the prefill only: ORT's GQA
  kernel takes decode-step rotary positions from cache slots, which is wrong
  for a left-padded row (a known kernel limitation, not an MoE matter).
"""

from __future__ import annotations


import numpy as np
import onnx
import pytest

from mobius.builder import build
from mobius.ep.registry import ep_registry
from mobius.models import mixtral, qwen_moe
from mobius.models import moe_families_cases as cases
from mobius.models.moe_families_cases import VARIANTS
from mobius.optimize.histogram import op_histogram
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype
from testing.model_runs import BuiltPackage, f32_parity
from testing.checkpoint_runs import checkpoint, reference
from testing.ep_suite import Builds, Checkpoints

FAMILIES = {f.name: f for f in (mixtral.FAMILY, qwen_moe.QWEN3_MOE, qwen_moe.QWEN2_MOE)}

MOE = "com.microsoft::MoE"
STANDARD_DOMAINS = ("", "ai.onnx")


def _sparse_layers(config) -> int:
    if config.model_type == "mixtral":
        return config.num_hidden_layers
    return sum(qwen_moe.is_sparse_layer(config, i) for i in range(config.num_hidden_layers))


def _experts(config) -> int:
    raw = config.raw
    return raw.get("num_local_experts") or raw["num_experts"]


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
def test_builds_for_every_ep_and_passes_the_full_checker(builds, family, ep, dtype):
    built = builds.get(family, ep, dtype)
    histogram = op_histogram(built.model)
    config = built.config
    caps = ep_registry.get(ep)
    blocks = _sparse_layers(config)
    if caps.fuses_moe(parse_dtype(dtype)):
        assert histogram[MOE] == blocks, histogram
        assert not histogram.get("NonZero") and not histogram.get("ScatterND"), histogram
    else:
        assert not histogram.get(MOE), histogram
        assert histogram["NonZero"] == histogram["ScatterND"] == blocks * _experts(config)
    if ep == "onnx-standard":
        assert all(op.split("::")[0] in STANDARD_DOMAINS for op in histogram if "::" in op)
    onnx.checker.check_model(built.onnx_bytes(), full_check=True)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_f32_parity_with_transformers(tmp_path, variant):
    """Generic graph: left-padded batch prefill + 3 decode steps, <= 1e-4."""
    run, _ = _parity(checkpoint(cases, variant), tmp_path, "default", "f32",
                     reference(cases, variant, "padded"))
    assert run.max_abs_diff <= 1e-4, f"{variant}: max |logit diff| {run.max_abs_diff:.3g}"


def _parity(folder, tmp_path, ep, dtype, ref, *, steps=3):
    """``folder`` built for ``ep`` in ``dtype`` against transformers' recorded run ``ref``."""
    package = build(folder, execution_provider=ep, dtype=dtype, prefill_logits="all")
    path = package.save(str(tmp_path / f"{ep}-{dtype}"), overwrite=True)
    return f32_parity(BuiltPackage(path, package.config, dtype), ref, steps=steps), package


def _uses_fused_rotary(package) -> bool:
    return any(n.op_type == "GroupQueryAttention" and n.attributes.get("do_rotary") is not None
               and n.attributes["do_rotary"].value == 1 for n in package.models["model"].graph)


def _tolerance(dtype: str, run) -> float:
    if dtype == "f32":
        return 1e-4
    scale = max(float(np.abs(step).max()) for step in run.hf_steps)
    return 8 * 2.0 ** (np.floor(np.log2(scale)) - 10)  # 8 f16 spacings at the logits' scale


EP_CASES = [(f, ep, dtype) for f in ("mixtral", "qwen3_moe", "qwen2_moe")
            for ep, dtype in (("cpu", "f32"), ("cpu", "f16"), ("cuda", "f32"), ("cuda", "f16"))]


@pytest.mark.parametrize("variant,ep,dtype", EP_CASES, ids=["-".join(c) for c in EP_CASES])
def test_ep_graph_parity_on_the_cpu_ep(tmp_path, variant, ep, dtype):
    folder = checkpoint(cases, variant)
    unpadded, package = _parity(folder, tmp_path / "a", ep, dtype,
                                reference(cases, variant, "unpadded"))
    fused_moe = op_histogram(package.models["model"]).get(MOE, 0)
    assert bool(fused_moe) == ep_registry.get(ep).fuses_moe(parse_dtype(dtype))
    tol = _tolerance(dtype, unpadded)
    assert unpadded.max_abs_diff <= tol, (
        f"{ep}/{dtype} {variant} unpadded: {unpadded.max_abs_diff:.3g} > {tol:.3g}")
    steps = 0 if _uses_fused_rotary(package) else 3
    padded, _ = _parity(folder, tmp_path / "b", ep, dtype, reference(cases, variant, "padded"),
                        steps=steps)
    assert padded.max_abs_diff <= tol, (
        f"{ep}/{dtype} {variant} left-padded ({steps} steps): {padded.max_abs_diff:.3g} > {tol:.3g}")
