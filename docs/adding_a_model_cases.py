"""transformers' side of adding_a_model_test (the reference_cases rule runs it at build time,
//rules:references.bzl): the doc's template family is a Llama under a new model_type whose
tiny preset is mobius.tiny.bases.COMMON, so transformers' LlamaForCausalLM on that config
is its reference: the checkpoint (saved under the new model_type) and its parity run.
"""

from __future__ import annotations

import json
import os

CASES = ["llama_clone"]
#: the names the template's preset gives the checkpoint (the rest is COMMON)
NAMES = {"model_type": "llama_clone", "architectures": ["LlamaCloneForCausalLM"]}


def write_case(case: str, folder: str) -> None:
    """ckpt/ (every parameter random, config.json under NAMES), reference.npz
    (testing/decoder_reference.py) and config.json: the Llama config it was made from."""
    import torch
    import transformers

    from mobius.tiny.bases import COMMON
    from testing import decoder_reference
    from testing.hf_checkpoints import randomize_parameters

    raw = {k: v for k, v in COMMON.items() if k not in NAMES}
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**raw)).eval()
    randomize_parameters(model, 0)
    checkpoint = os.path.join(folder, "ckpt")
    model.save_pretrained(checkpoint, safe_serialization=True)
    with open(os.path.join(checkpoint, "config.json")) as f:
        saved = json.load(f)
    saved.update(NAMES)
    with open(os.path.join(checkpoint, "config.json"), "w") as f:
        json.dump(saved, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(raw, f)
    run = decoder_reference.record(model, model.config.vocab_size)
    decoder_reference.save(run, os.path.join(folder, "reference.npz"))
