"""L3 for the default EP: the generic graph is the reference every other EP's
parity test compares with, so here it is checked against itself, on
onnxruntime's CPU EP (testing/ep_parity.py):

* KV-cached decode (prefill + 3 greedy steps) equals recomputing the whole
  sequence without a cache -- logits and present KV;
* a left-padded row of a batch equals the same row alone, unpadded
  (positions come from the attention mask, so padding must be invisible);
* for f32, f16 and bf16 (default computes bf16 builds in f32, so the CPU EP
  runs them; ep_parity.NOT_CPU_RUNNABLE has no default entry).

(Its parity with transformers is the per-family L3 suite's job.)
"""

import pytest

from testing import ep_parity, ep_suite as s

EP = "default"
CPU_DTYPES = [d for d in s.EP_DTYPES[EP] if ep_parity.cpu_runnable(EP, d)]
CPU_MATRIX = [(f, d) for f, d in s.matrix(EP) if d in CPU_DTYPES]


@pytest.mark.parametrize("family,dtype", s.params(CPU_MATRIX))
def test_cached_decode_equals_recompute(builds, family, dtype):
    built = builds.get(family, EP, dtype)
    diff = ep_parity.recompute_diff(built.model, built.config, dtype)
    ep_parity.assert_close(diff, dtype, f"default/{dtype} {family}: cached decode vs recompute")


@pytest.mark.parametrize("family,dtype", s.params(CPU_MATRIX))
def test_left_padding_is_invisible(builds, family, dtype):
    built = builds.get(family, EP, dtype)
    diff = ep_parity.padding_diff(built.model, built.config, dtype)
    ep_parity.assert_close(diff, dtype, f"default/{dtype} {family}: padded row vs alone")


def test_every_default_build_is_cpu_runnable():
    assert CPU_DTYPES == list(s.EP_DTYPES[EP])
