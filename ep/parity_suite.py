"""L3 parity of one EP's graphs, on onnxruntime's CPU EP: the shared suite.

``ep/<name>/<name>_parity_test.py`` instantiates it with
``globals().update(parity_suite.tests_for("<ep>"))``. The EP graph of every
decoder family must give the logits and present KV of the generic
("default") graph of the same dtype over a prefill and 3 greedy decode steps
(how, and the tolerances: testing/ep_parity.py):

* unpadded batch, every dtype whose EP graph the CPU EP runs;
* left-padded batch (row 1 padded by 3). For graphs whose GroupQueryAttention
  applies RoPE itself (``do_rotary=1``) only the prefill logits are compared:
  ORT's GQA kernel ignores position_ids on the first prompt and rotates Q/K
  by cache slot (so a left-padded row's cached keys are rotated pad-count
  positions too far -- its prefill logits still match, RoPE being relative),
  but rotates decode steps at position_ids, so padded rows go wrong from the
  first decode step on: a known kernel limitation (docs/eps.md).
* vision-language packages (image-text-to-text): vision, embedding and
  decoder (prefill + 2 greedy decode steps) model by model, each on the
  generic package's inputs (testing/ep_vlm_parity.py), CPU-runnable dtypes;
* dtypes the CPU EP cannot run (NOT_CPU_RUNNABLE in testing/ep_parity.py;
  test_not_cpu_runnable proves it) run through onnx.reference instead, custom
  ops via their function bodies: that checks the rewritten graph's meaning,
  not the EP's kernels.

The generic graph's side of each comparison is the same in every EP's target: under
Bazel it was run once (testing/generic_runs.py) and is loaded here.
"""

from __future__ import annotations

from typing import Callable

import pytest

from mobius.ep.registry import get_ep
from testing import (ep_builds, ep_parity, ep_suite as s, ep_vlm_parity, generic_runs,
                     static_decoder)


def _diff(built, generic, family: str, dtype: str, pad: int, backend: str = "ort",
          **kwargs) -> ep_parity.Diff:
    """ep_parity.ep_vs_generic on the stored generic run where there is one."""
    stored = generic_runs.load(generic, family, generic_runs.case(backend, pad))
    return ep_parity.ep_vs_generic(built.onnx_bytes(), generic.onnx_bytes(), built.config,
                                   dtype, pad=pad, backend=backend, reference=stored, **kwargs)


def _spacings(family: str) -> int:
    """The low-precision tolerance in spacings (testing/ep_parity.tolerances)."""
    unscaled = "unscaled_attention" in s.family(family).attention_traits
    return ep_parity.UNSCALED_SPACINGS if unscaled else ep_parity.HALF_ULPS


def tests_for(ep: str) -> dict[str, Callable]:
    """The parametrized test functions for ``ep`` (to put in a test module's globals)."""
    cpu_dtypes = [d for d in s.EP_DTYPES[ep] if ep_parity.cpu_runnable(ep, d)]
    other_dtypes = [d for d in s.EP_DTYPES[ep] if not ep_parity.cpu_runnable(ep, d)]
    cpu_matrix = [(f, d) for f, d in s.matrix(ep) if d in cpu_dtypes]
    other_matrix = [(f, d) for f, d in s.matrix(ep) if d in other_dtypes]
    if get_ep(ep).static_context_length:
        return _static_tests(ep, cpu_matrix)

    @pytest.mark.parametrize("family,dtype", s.params(cpu_matrix))
    def test_unpadded(builds, family, dtype):
        built, generic = builds.get(family, ep, dtype), builds.get(family, "default", dtype)
        diff = _diff(built, generic, family, dtype, pad=0)
        ep_parity.assert_close(diff, dtype, f"{ep}/{dtype} {family} vs default, unpadded",
                               _spacings(family))

    @pytest.mark.parametrize("family,dtype", s.params(cpu_matrix))
    def test_left_padded(builds, family, dtype):
        built, generic = builds.get(family, ep, dtype), builds.get(family, "default", dtype)
        fused_rope = ep_parity.uses_fused_rotary(built.model)
        diff = _diff(built, generic, family, dtype, pad=3, steps=0 if fused_rope else 3,
                     presents=not fused_rope)
        what = "prefill logits only (fused RoPE)" if fused_rope else "3 decode steps"
        ep_parity.assert_close(diff, dtype,
                               f"{ep}/{dtype} {family} vs default, left-padded, {what}",
                               _spacings(family))

    def test_generic_runs_are_stored():
        """Under Bazel (the suite's builds prebuilt) the generic side comes from
        //ep:generic_runs: a target whose runfiles lack it would quietly rerun every
        generic graph itself, as all of them did while that rule returned no runfiles."""
        if ep_builds.prebuilt_archives(ep) is None:
            return  # outside Bazel: everything is built and run in-process
        assert generic_runs.roots(), f"//ep:generic_runs is not in the {ep} suite's runfiles"

    tests = {"test_unpadded": test_unpadded, "test_left_padded": test_left_padded}
    if ep != "default":  # the default EP's graphs are the generic ones
        tests["test_generic_runs_are_stored"] = test_generic_runs_are_stored
    vlm_matrix = ep_vlm_parity.vlm_matrix(ep, cpu_dtypes)
    if vlm_matrix:  # none for an EP that serves text generation only (MLX)

        @pytest.mark.parametrize("family,dtype", s.params(vlm_matrix))
        def test_vision_language(builds, family, dtype):
            built, generic = builds.get(family, ep, dtype), builds.get(family, "default", dtype)
            ep_vlm_parity.assert_vlm_close(
                built, generic, family, f"{ep}/{dtype} {family} vs default (vision-language)",
                generic=generic_runs.load(generic, family, generic_runs.VISION_LANGUAGE),
                spacings=_spacings(family))

        tests["test_vision_language"] = test_vision_language
    if not other_dtypes:
        return tests

    @pytest.mark.parametrize("family,dtype", s.params(other_matrix))
    def test_function_bodies_on_onnx_reference(builds, family, dtype):
        """Graphs the CPU EP cannot run: same meaning, via onnx.reference (contrib-op bodies)."""
        built, generic = builds.get(family, ep, dtype), builds.get(family, "default", dtype)
        diff = _diff(built, generic, family, dtype, pad=3, backend="reference")
        ep_parity.assert_close(diff, dtype, f"{ep}/{dtype} {family} vs default (onnx.reference)",
                               _spacings(family))

    @pytest.mark.parametrize("dtype", other_dtypes)
    def test_not_cpu_runnable(builds, dtype):
        """What docs/eps.md lists as not CPU-runnable really fails on the CPU EP."""
        built = builds.get("llama", ep, dtype)
        ep_parity.assert_not_cpu_runnable(built.onnx_bytes(), built.config, dtype)

    tests["test_function_bodies_on_onnx_reference"] = test_function_bodies_on_onnx_reference
    tests["test_not_cpu_runnable"] = test_not_cpu_runnable
    return tests


def _static_tests(ep: str, matrix: list) -> dict[str, Callable]:
    """A static-shape EP's decoders (batch 1, fixed chunk and cache) take none of the batches
    above: each is driven by testing/static_decoder.py (chunked prefill, sliding cache) and
    its logits compared with the generic graph's on the same tokens, prefill + 3 steps."""

    @pytest.mark.parametrize("family,dtype", s.params(matrix))
    def test_static_decoder(builds, family, dtype):
        built, generic = builds.get(family, ep, dtype), builds.get(family, "default", dtype)
        # a hybrid's recurrent state, a VLM decoder's embeddings: refused by name
        if static_decoder.undriven(v.name for v in built.model.graph.inputs):
            with pytest.raises(ValueError, match="are not driven here"):
                static_decoder.static_vs_generic(built.onnx_bytes(), generic.onnx_bytes(),
                                                 built.config, dtype)
            return
        diff = static_decoder.static_vs_generic(built.onnx_bytes(), generic.onnx_bytes(),
                                                built.config, dtype)
        ep_parity.assert_close(diff, dtype, f"{ep}/{dtype} {family} vs default, static decoder")

    return {"test_static_decoder": test_static_decoder}
