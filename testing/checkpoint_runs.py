"""A parity case as a reference_cases output (//rules:references.bzl): a checkpoint and
transformers' recorded runs on it, written at build time, read by a test without torch.

A case folder holds ``ckpt/`` (the checkpoint) and one ``<run>.npz`` per run
(testing/decoder_reference.py): "padded" (row 1 left-padded by 3) and "unpadded", each
a prefill + 3 greedy decode steps unless the cases module asks for others. A cases
module's ``write_case`` calls ``write``; its test calls ``checkpoint`` and ``reference``.
"""

from __future__ import annotations

import os
from typing import Callable

from testing import decoder_reference
from testing.reference_cases import case_dir

#: run name -> left padding of row 1
RUNS = {"padded": 3, "unpadded": 0}


def write(folder: str, make: Callable[[str], str], runs: dict[str, int] | None = None, *,
          prompt_len: int = 10, steps: int = 3) -> str:
    """``make(<folder>/ckpt)`` writes the checkpoint; then transformers' run of each of
    ``runs`` (name -> pad; default RUNS) on it. Returns the checkpoint folder."""
    from testing.hf_checkpoints import load_hf_model

    checkpoint = make(os.path.join(folder, "ckpt"))
    record(load_hf_model(checkpoint), folder, runs, prompt_len=prompt_len, steps=steps)
    return checkpoint


def record(hf_model, folder: str, runs: dict[str, int] | None = None, *, prompt_len: int = 10,
           steps: int = 3) -> None:
    """Saves ``hf_model``'s run of each of ``runs`` (default RUNS) as <folder>/<run>.npz."""
    vocab = hf_model.config.get_text_config().vocab_size
    for name, pad in (RUNS if runs is None else runs).items():
        run = decoder_reference.record(hf_model, vocab, prompt_len=prompt_len, steps=steps,
                                       pad=pad)
        decoder_reference.save(run, os.path.join(folder, name + ".npz"))


def checkpoint(cases, case: str) -> str:
    """The case's checkpoint folder (read-only: copy it before editing)."""
    return os.path.join(case_dir(cases, case), "ckpt")


def reference(cases, case: str, run: str = "padded") -> decoder_reference.DecoderReference:
    """transformers' recorded ``run`` of the case."""
    return decoder_reference.load(os.path.join(case_dir(cases, case), run + ".npz"))
