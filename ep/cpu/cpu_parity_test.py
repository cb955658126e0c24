"""L3 parity for the cpu EP, on onnxruntime's CPU EP.

The cpu graph of every decoder family must give the logits and present KV
of the generic ("default") graph of the same dtype over a prefill and 3
greedy decode steps (how, and the tolerances: testing/ep_parity.py):

* unpadded batch, every dtype whose cpu graph the CPU EP runs (f32);
* left-padded batch (row 1 padded by 3). For graphs whose GroupQueryAttention
  applies RoPE itself (``do_rotary=1``) only the prefill logits are compared:
  ORT's GQA kernel ignores position_ids on the first prompt and rotates Q/K
  by cache slot (so a left-padded row's cached keys are rotated pad-count
  positions too far -- its prefill logits still match, RoPE being relative),
  but rotates decode steps at position_ids, so padded rows go wrong from the
  first decode step on: a known kernel limitation (docs/eps.md).
"""

import pytest

from testing import ep_parity, ep_suite as s
from testing.ep_suite import builds  # noqa: F401  (module-scoped fixture)

EP = "cpu"
CPU_DTYPES = [d for d in s.EP_DTYPES[EP] if ep_parity.cpu_runnable(EP, d)]
OTHER_DTYPES = [d for d in s.EP_DTYPES[EP] if not ep_parity.cpu_runnable(EP, d)]
CPU_MATRIX = [(f, d) for f, d in s.matrix(EP) if d in CPU_DTYPES]


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
