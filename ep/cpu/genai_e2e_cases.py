"""transformers' side of genai_e2e_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per decoder family, its tiny checkpoint and transformers' greedy
tokens on PROMPTS.
"""

from __future__ import annotations

import os

from mobius.models.registry import FAMILIES
from mobius.roles import DECODER

NEW_TOKENS = 12
# transformers' default initializer_range (0.02) makes tiny models repeat one
# token; 0.2 gives varied continuations with top-1/top-2 gaps far above noise
# (see mobius/package/genai_e2e_test.py).
OVERRIDES = {"initializer_range": 0.2}
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids
#: family: tiny preset, for testing/ep_suite.decoder_family_names() (the test checks they
#: are the same families; ep_suite's deps, all of mobius, would make every mobius edit
#: rerun every reference_cases action)
PRESETS = {f.name: f.tiny_preset for f in FAMILIES
           if f.tiny_preset and dict(f.task.roles) == {"model": DECODER}}
CASES = list(PRESETS)


def write_case(family: str, folder: str) -> None:
    """ckpt/ and transformers.json (genai_harness.record_hf_generate)."""
    from testing import genai_harness
    from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESETS[family], **OVERRIDES)
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"),
                                     load_hf_model(checkpoint), PROMPTS, NEW_TOKENS)
