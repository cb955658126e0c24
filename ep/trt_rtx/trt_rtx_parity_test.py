"""L3 parity for the trt-rtx EP, on onnxruntime's CPU EP.

The trt-rtx graph of every decoder family must give the logits and present KV
of the generic ("default") graph of the same dtype over a prefill and 3
greedy decode steps (how, and the tolerances: testing/ep_parity.py):

* unpadded batch, every dtype whose trt-rtx graph the CPU EP runs (f16, f32);
* left-padded batch (row 1 padded by 3). For graphs whose GroupQueryAttention
  applies RoPE itself (``do_rotary=1``) only the prefill logits are compared:
  ORT's GQA kernel ignores position_ids on the first prompt and rotates Q/K
  by cache slot (so a left-padded row's cached keys are rotated pad-count
  positions too far -- its prefill logits still match, RoPE being relative),
  but rotates decode steps at position_ids, so padded rows go wrong from the
  first decode step on: a known kernel limitation (docs/eps.md).
* bf16: the CPU EP cannot run these graphs (NOT_CPU_RUNNABLE in
  testing/ep_parity.py; test_not_cpu_runnable proves it), so they run through
  onnx.reference instead, custom ops via their function bodies: that checks
  the rewritten graph's meaning, not the EP's kernels.
"""

import pytest

from testing import ep_parity, ep_suite as s
from testing.ep_suite import builds  # noqa: F401  (module-scoped fixture)

EP = "trt-rtx"
CPU_DTYPES = [d for d in s.EP_DTYPES[EP] if ep_parity.cpu_runnable(EP, d)]
OTHER_DTYPES = [d for d in s.EP_DTYPES[EP] if not ep_parity.cpu_runnable(EP, d)]
CPU_MATRIX = [(f, d) for f, d in s.matrix(EP) if d in CPU_DTYPES]
OTHER_MATRIX = [(f, d) for f, d in s.matrix(EP) if d in OTHER_DTYPES]


@pytest.mark.parametrize("family,dtype", s.params(CPU_MATRIX))
def test_unpadded(builds, family, dtype):  # noqa: F811
    built, generic = builds.get(family, EP, dtype), builds.get(family, "default", dtype)
    diff = ep_parity.ep_vs_generic(built.model, generic.model, built.config, dtype, pad=0)
    ep_parity.assert_close(diff, dtype, f"{EP}/{dtype} {family} vs default, unpadded")


@pytest.mark.parametrize("family,dtype", s.params(CPU_MATRIX))
def test_left_padded(builds, family, dtype):  # noqa: F811
    built, generic = builds.get(family, EP, dtype), builds.get(family, "default", dtype)
    fused_rope = ep_parity.uses_fused_rotary(built.model)
    diff = ep_parity.ep_vs_generic(built.model, generic.model, built.config, dtype, pad=3,
                                   steps=0 if fused_rope else 3, presents=not fused_rope)
    what = "prefill logits only (fused RoPE)" if fused_rope else "3 decode steps"
    ep_parity.assert_close(diff, dtype, f"{EP}/{dtype} {family} vs default, left-padded, {what}")


@pytest.mark.parametrize("family,dtype", s.params(OTHER_MATRIX))
def test_function_bodies_on_onnx_reference(builds, family, dtype):  # noqa: F811
    """Graphs the CPU EP cannot run: same meaning, via onnx.reference (contrib-op bodies)."""
    built, generic = builds.get(family, EP, dtype), builds.get(family, "default", dtype)
    diff = ep_parity.ep_vs_generic(built.model, generic.model, built.config, dtype, pad=3,
                                   backend="reference")
    ep_parity.assert_close(diff, dtype, f"{EP}/{dtype} {family} vs default (onnx.reference)")


@pytest.mark.parametrize("dtype", OTHER_DTYPES)
def test_not_cpu_runnable(builds, dtype):  # noqa: F811
    """What docs/eps.md lists as not CPU-runnable really fails on the CPU EP."""
    built = builds.get("llama", EP, dtype)
    ep_parity.assert_not_cpu_runnable(built.model, built.config, dtype)
