"""The torch side of phi3small_test (the reference_cases rule runs it at build time,
//rules:references.bzl).

transformers has no Phi-3-small class (the hub checkpoints ship modeling_phi3_small.py
and a Triton block-sparse kernel as auto_map code, which no test runs), so each checkpoint
is written in the hub layout by testing/hf_checkpoints.make_hf_checkpoint (mobius' numpy
writer: every tensor random, biases included), and the reference is
testing/phi3small_reference.py (transformers' Llama with Phi-3-small's parts and the
block-sparse layout put in). Each case: ckpt/, padded.npz + unpadded.npz
(testing/checkpoint_runs.py) and transformers.json (greedy tokens for the genai test).
"""

from __future__ import annotations

import os

PRESET = "tiny-phi3small"
NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids

#: case -> config overrides of the preset (layer 0 block-sparse per head, layer 1 dense)
CONFIGS: dict[str, dict] = {
    "sparse": {},
    "homo_untied": {"blocksparse_homo_head_pattern": True, "tie_word_embeddings": False,
                    "mup_use_scaling": False, "mup_attn_multiplier": 40.0,
                    "layer_norm_epsilon": 0.5,
                    "blocksparse_vert_stride": 2},
    # the 10-token prompts run past original_max_position_embeddings 8: the long factors
    "longrope": {"rope_scaling": {"type": "su", "short_factor": [1.0, 1.5, 2.0, 1.0, 1.2, 3.0,
                                                                 1.1, 1.0],
                                  "long_factor": [2.0, 3.0, 1.5, 4.0, 2.5, 1.0, 6.0, 2.0]},
                 "max_position_embeddings": 200, "original_max_position_embeddings": 8,
                 "ff_intermediate_size": None, "ff_dim_multiplier": 2,
                 "gegelu_pad_to_256": False},
}
CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    from testing import checkpoint_runs, genai_harness
    from testing.hf_checkpoints import make_hf_checkpoint
    from testing.phi3small_reference import phi3small_reference

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESET, seed=7,
                                    **CONFIGS[case])
    checkpoint_runs.record(phi3small_reference(checkpoint), folder)
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"),
                                     phi3small_reference(checkpoint), PROMPTS, NEW_TOKENS)
