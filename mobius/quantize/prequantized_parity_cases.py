"""transformers' side of prequantized_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): each GPTQ / AWQ checkpoint (testing/prequantized_checkpoints.py)
and transformers' run of the float model its integers stand for.
"""

from __future__ import annotations

import os
import shutil

from testing.prequantized_checkpoints import awq_config, gptq_config

PREQUANTIZED = {
    # name: (quantization_config, EPs, tiny preset)
    "gptq-int4-asym-act-order-g32": (gptq_config(4, 32, sym=False, desc_act=True),
                                     ("cpu", "default", "onnx-standard"), "tiny-llama"),
    "gptq-int8-sym-g-1": (gptq_config(8, None, sym=True), ("cpu",), "tiny-llama"),
    "gptq_v2-int4-asym-g48": (gptq_config(4, 48, sym=False, checkpoint_format="gptq_v2"),
                              ("cpu",), "tiny-llama"),
    "awq-int4-g32": (awq_config(32), ("cpu", "default"), "tiny-llama"),
    # Phi-3: fused qkv_proj / gate_up_proj, read as row slices of one packed Linear
    "phi3-gptq-int4-asym-act-order-g32": (gptq_config(4, 32, sym=False, desc_act=True),
                                          ("cpu",), "tiny-phi3"),
}
CASES = sorted(PREQUANTIZED)
#: the parity run: unpadded (see the test's docstring), prefill + 2 decode steps
PAD, STEPS = 0, 2


def write_case(name: str, folder: str) -> None:
    """ckpt/ (the packed checkpoint) and reference.npz: transformers' run of the same model
    with the exact dequantized float weights (testing/decoder_reference.py)."""
    from testing import decoder_reference
    from testing.hf_checkpoints import load_hf_model
    from testing.prequantized_checkpoints import write_prequantized

    config, _, preset = PREQUANTIZED[name]
    biases = dict(attention_bias=True, mlp_bias=True) if preset == "tiny-llama" else {}
    floats = os.path.join(folder, "float")
    write_prequantized(os.path.join(folder, "ckpt"), floats, config, preset=preset,
                       intermediate_size=160, **biases)
    model = load_hf_model(floats)
    run = decoder_reference.record(model, model.config.vocab_size, pad=PAD, steps=STEPS)
    decoder_reference.save(run, os.path.join(folder, "reference.npz"))
    shutil.rmtree(floats)  # the test reads the recording, not the float checkpoint
