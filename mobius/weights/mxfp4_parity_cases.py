"""transformers' side of mxfp4_parity_test (//rules:references.bzl): the MXFP4 gpt-oss
checkpoint testing/fp8_checkpoints.py writes (mxfp4/) with its exact float experts
(mxfp4-ref/), and the parity run of check_f32_parity (reference.npz: no padding, 2 decode
steps) of transformers' CPU loader, which dequantizes MXFP4 (Mxfp4Config(dequantize=True)).
"""

from __future__ import annotations

import os

CASES = ["mxfp4"]


def write_case(case: str, folder: str) -> None:
    """mxfp4/, mxfp4-ref/ and reference.npz (see the module docstring)."""
    import torch
    import transformers

    from testing import decoder_reference
    from testing.fp8_checkpoints import write_mxfp4

    checkpoint = write_mxfp4(os.path.join(folder, "mxfp4"), os.path.join(folder, "mxfp4-ref"))
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=torch.float32,
        quantization_config=transformers.Mxfp4Config(dequantize=True)).eval()
    run = decoder_reference.record(reference, reference.config.vocab_size, pad=0, steps=2)
    decoder_reference.save(run, os.path.join(folder, "reference.npz"))
