"""The torch side of chatglm_test (the reference_cases rule runs it at build time,
//rules:references.bzl).

transformers has no ChatGLM class (the hub checkpoints ship modeling_chatglm.py as
auto_map code, which no test runs), so each checkpoint is written in the hub layout by
testing/hf_checkpoints.make_hf_checkpoint (mobius' numpy writer: every tensor random,
biases included), and the reference is transformers' GlmForCausalLM (the class
transformers converted ChatGLM into) with the weights remapped
(testing/remapped_references.py). Each case: ckpt/, padded.npz + unpadded.npz
(testing/checkpoint_runs.py) and transformers.json (greedy tokens for the genai test).
"""

from __future__ import annotations

import os

PRESET = "tiny-chatglm"
NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids

#: case -> config overrides of the preset (2 K/V groups, Q/K/V biases, rope_ratio 5)
CONFIGS: dict[str, dict] = {
    "gqa_qkv_bias": {},
    "mha_no_bias": {"multi_query_attention": False, "add_qkv_bias": False, "rope_ratio": 1.0},
}
CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    from testing import checkpoint_runs, genai_harness
    from testing.hf_checkpoints import make_hf_checkpoint
    from testing.remapped_references import glm_reference

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESET, seed=7,
                                    **CONFIGS[case])
    model = glm_reference(checkpoint)
    checkpoint_runs.record(model, folder)
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"), model,
                                     PROMPTS, NEW_TOKENS)
