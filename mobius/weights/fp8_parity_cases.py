"""transformers' side of fp8_parity_test (//rules:references.bzl): per case, the FP8
checkpoint testing/fp8_checkpoints.py writes (fp8/) with its exact float weights
(fp8-ref/), and the reference's parity run of check_f32_parity (reference.npz: no padding,
2 decode steps). Where transformers' CPU loader reads the FP8 folder (it dequantizes FP8
when no GPU kernel is available) it is the reference; for blocks that do not divide the
weight, transformers' dequantizer derives the block from the scale grid and refuses or
misreads the shape, so the reference is transformers on the exact float weights.
"""

from __future__ import annotations

import os

import ml_dtypes

from testing.fp8_checkpoints import fp8_config

FP8 = {
    # name: (writer kwargs, transformers reads the FP8 folder)
    "block32": (dict(quantization_config=fp8_config((32, 32)), intermediate_size=160), True),
    "per-tensor-bf16-scales": (dict(quantization_config=fp8_config(None),
                                    scale_dtype=ml_dtypes.bfloat16), True),
    "ragged-16x24": (dict(quantization_config=fp8_config((16, 24))), False),
}
CASES = sorted(FP8)


def write_case(case: str, folder: str) -> None:
    """fp8/, fp8-ref/ and reference.npz (see the module docstring)."""
    import torch
    import transformers

    from testing import decoder_reference
    from testing.fp8_checkpoints import write_fp8
    from testing.hf_checkpoints import load_hf_model

    kwargs, reads_fp8 = FP8[case]
    fp8 = write_fp8(os.path.join(folder, "fp8"), os.path.join(folder, "fp8-ref"), **kwargs)
    reference = (transformers.AutoModelForCausalLM.from_pretrained(fp8, dtype=torch.float32)
                 if reads_fp8 else load_hf_model(fp8 + "-ref")).eval()
    run = decoder_reference.record(reference, reference.config.vocab_size, pad=0, steps=2)
    decoder_reference.save(run, os.path.join(folder, "reference.npz"))
