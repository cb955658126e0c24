"""transformers' side of dense_families_genai_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per preset of the "genai" cohort, a checkpoint with every
parameter random and transformers' greedy tokens on PROMPTS.
"""

from __future__ import annotations

import os

from mobius.models.registry import cohort

NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids
#: the families that declare the "genai" cohort (mobius/models/family.py): dense decoders,
#: MoE routings, Mamba2 + attention (genai carries each Mamba layer's conv and recurrent
#: state; right-padded prompts: the short row's state stops at its last token) and
#: short-convolution + attention hybrids (genai's conv state cache)
CASES = [family.tiny_preset for family in cohort("genai")]
#: presets whose zero-initialized tensors (DeepSeek-V3's, EXAONE-MoE's and MiniMax-M2's
#: e_score_correction_bias, LFM2-MoE's expert_bias) decide routing: randomized so that
#: dropping them changes the tokens
RANDOMIZE_ZEROS = {"tiny-deepseek-v2", "tiny-deepseek-v3", "tiny-exaone_moe", "tiny-glm4_moe",
                   "tiny-lfm2-moe", "tiny-minimax_m2"}


def write_case(preset: str, folder: str) -> None:
    """ckpt/ and transformers.json (genai_harness.record_hf_generate: greedy tokens per
    prompt and the top-1 / top-2 score gap at each step)."""
    from testing import genai_harness
    from testing.hf_checkpoints import randomize_zero_tensors
    from testing.random_checkpoint import random_checkpoint

    checkpoint = random_checkpoint(os.path.join(folder, "ckpt"), preset)
    if preset in RANDOMIZE_ZEROS:
        randomize_zero_tensors(checkpoint)
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"), checkpoint,
                                     PROMPTS, NEW_TOKENS)
