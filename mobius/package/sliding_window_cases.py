"""transformers' side of sliding_window_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per preset a transformers-written checkpoint (initializer_range 0.2)
and transformers' greedy tokens on PROMPT (transformers.json); "tiny-mistral-plain": the
preset's own checkpoint.
"""

from __future__ import annotations

import json
import os

PROMPT = [5, 17, 33, 44, 91, 120, 7, 8, 9, 10, 11]
NEW_TOKENS = 20
#: Mistral (every layer sliding, window 8), Gemma 2 (sliding + full, window 6), Cohere2
#: (two sliding + one full, window 4)
PRESETS = ["tiny-mistral", "tiny-gemma2", "tiny-cohere2"]
PLAIN = "tiny-mistral-plain"

CASES = [*PRESETS, PLAIN]


def write_case(case: str, folder: str) -> None:
    """ckpt/ and transformers.json ({"tokens": the greedy tokens}); PLAIN: ckpt/ only."""
    from testing import genai_harness
    from testing.hf_checkpoints import make_hf_checkpoint

    checkpoint = os.path.join(folder, "ckpt")
    if case == PLAIN:
        make_hf_checkpoint(checkpoint, "tiny-mistral")
        return
    make_hf_checkpoint(checkpoint, case, initializer_range=0.2)
    tokens = genai_harness.hf_generate(checkpoint, [PROMPT], NEW_TOKENS)
    with open(os.path.join(folder, "transformers.json"), "w") as f:
        json.dump({"tokens": tokens}, f)
