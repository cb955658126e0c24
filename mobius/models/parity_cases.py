"""transformers' side of parity_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each case's transformers-written checkpoint with transformers'
padded run (testing/checkpoint_runs.py); mistral_sliding_window also with the last decode
step's logits with and without its window (window.npz).
"""

from __future__ import annotations

import os

PROMPT, STEPS, PAD = 10, 3, 3

#: name: (tiny preset, config overrides)
CONFIGS = {
    "llama": ("tiny-llama", {}),
    "llama_tied": ("tiny-llama", {"tie_word_embeddings": True}),
    "llama_bias": ("tiny-llama", {"attention_bias": True, "mlp_bias": True}),
    "mistral_sliding_window": ("tiny-mistral", {"sliding_window": 6}),
    "qwen2": ("tiny-qwen2", {}),
    "qwen2_untied": ("tiny-qwen2", {"tie_word_embeddings": False}),
    "qwen3": ("tiny-qwen3", {}),
    "qwen3_untied": ("tiny-qwen3", {"tie_word_embeddings": False}),
}

CASES = sorted(CONFIGS)


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz; mistral_sliding_window also window.npz."""
    from testing import checkpoint_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    preset, overrides = CONFIGS[case]
    checkpoint = checkpoint_runs.write(
        folder, lambda ckpt: make_hf_checkpoint(ckpt, preset, **overrides), {"padded": PAD},
        prompt_len=PROMPT, steps=STEPS)
    if case == "mistral_sliding_window":
        _write_window_logits(checkpoint, os.path.join(folder, "window.npz"))


def _write_window_logits(checkpoint: str, path: str) -> None:
    """The last step's logits of the padded prompt + STEPS fixed tokens, with the
    checkpoint's sliding window ("windowed") and without ("full")."""
    import numpy as np
    import transformers

    from testing import parity
    from testing.hf_checkpoints import load_hf_model

    windowed = load_hf_model(checkpoint)
    full = transformers.AutoModelForCausalLM.from_pretrained(checkpoint,
                                                             sliding_window=None).eval()
    ids, mask = parity.make_batch(windowed.config.vocab_size, PROMPT, PAD)
    tokens = [np.array([[5], [6]], np.int64) for _ in range(STEPS)]
    np.savez(path, windowed=parity.hf_logits(windowed, ids, mask, tokens)[-1],
             full=parity.hf_logits(full, ids, mask, tokens)[-1])
