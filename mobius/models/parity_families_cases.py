"""transformers' side of parity_families_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per family, its seed-0 transformers checkpoint and
transformers' padded run on it (testing/checkpoint_runs.py).
"""

from __future__ import annotations

from mobius.models.registry import FAMILIES

PROMPT, STEPS, PAD = 10, 3, 3
_CORE = {"tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"}
#: presets whose transformers model this recorder cannot drive as generate() does:
#: transformers' Mamba (v1) mixer broadcasts the [batch, total] attention_mask of a
#: cached decode step against the one new position (generate() passes no mask after
#: the prefill); ssm_families_cases.py records it as generate() runs it
_OWN_RECORDING = {"tiny-mamba"}

#: every registered decoder family but those parity_test.py covers with variants and
#: those recorded elsewhere
OTHER_FAMILIES = [f for f in FAMILIES
                  if f.task.reference.runner == "greedy_decode"
                  and f.tiny_preset not in _CORE | _OWN_RECORDING]
CASES = [f.tiny_preset for f in OTHER_FAMILIES]


def write_case(preset: str, folder: str) -> None:
    """ckpt/ (hf_checkpoints.make_hf_checkpoint, seed 0) and padded.npz."""
    from testing import checkpoint_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    checkpoint_runs.write(folder, lambda ckpt: make_hf_checkpoint(ckpt, preset), {"padded": PAD},
                          prompt_len=PROMPT, steps=STEPS)
