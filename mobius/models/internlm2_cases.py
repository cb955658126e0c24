"""The torch side of internlm2_test (the reference_cases rule runs it at build time,
//rules:references.bzl).

transformers has no InternLM2 class (the hub checkpoints ship modeling_internlm2.py as
auto_map code, which no test runs), so each checkpoint is written in the hub layout by
testing/hf_checkpoints.make_hf_checkpoint (mobius' numpy writer: every tensor random,
biases included), and the reference is transformers' LlamaForCausalLM with the weights
remapped (testing/remapped_references.py). Each case: ckpt/, padded.npz + unpadded.npz
(testing/checkpoint_runs.py) and transformers.json (greedy tokens for the genai test).
"""

from __future__ import annotations

import os

PRESET = "tiny-internlm2"
NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids

#: case -> config overrides of the preset (GQA 4 query heads over 2 K/V heads, biases)
CONFIGS: dict[str, dict] = {
    "gqa_bias": {},
    "no_bias": {"bias": False},
    "mha_tied": {"num_key_value_heads": None, "tie_word_embeddings": True},
    # the 10-token prompts run past max_position_embeddings 8: dynamic NTK rescales
    "rope_dynamic": {"rope_scaling": {"type": "dynamic", "factor": 3.0},
                     "max_position_embeddings": 8},
    "rope_linear": {"rope_scaling": {"type": "linear", "factor": 2.5}},
}
CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    from testing import checkpoint_runs, genai_harness
    from testing.hf_checkpoints import make_hf_checkpoint
    from testing.remapped_references import llama_reference

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESET, seed=7,
                                    **CONFIGS[case])
    # a fresh model per run: dynamic NTK keeps the longest length it has seen (as
    # modeling_internlm2.py's cos/sin cache does), so an earlier run would change a later one
    for run, pad in checkpoint_runs.RUNS.items():
        checkpoint_runs.record(llama_reference(checkpoint), folder, {run: pad})
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"),
                                     llama_reference(checkpoint), PROMPTS, NEW_TOKENS)
