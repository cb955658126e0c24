"""transformers + peft side of lora_adapter_test (//rules:references.bzl), one case "peft":

base/ (tiny-llama, every parameter random, initializer_range 0.2); per ADAPTERS name a
random (not zero-initialised) adapter saved by peft itself (<name>/); for the base model and
each adapter on it, peft's standard parity run at each PADS (<name or "base">-pad<pad>.npz,
testing/decoder_reference) and transformers' greedy tokens on PROMPT (tokens.json); and
phi3/ (tiny-phi3) with phi3-adapter/, an adapter on its fused qkv_proj.
"""

from __future__ import annotations

import json
import os

PROMPT = [5, 17, 33, 44, 91]
NEW_TOKENS = 12
#: two adapters on different Linears (one rsLoRA), so switching changes which ones move
ADAPTERS = {"alpha": (["q_proj", "v_proj", "down_proj"], {}),
            "beta": (["k_proj", "o_proj", "up_proj"], {"use_rslora": True})}
#: the left padding of row 1 in the recorded runs (cpu's GroupQueryAttention: none)
PADS = [0, 3]
CASES = ["peft"]


def run_name(adapter: str | None, pad: int) -> str:
    return f"{adapter or 'base'}-pad{pad}"


def _adapter(base_folder: str, folder: str, seed: int, targets, **lora) -> str:
    """A random (not zero-initialised) LoRA adapter saved by peft itself."""
    import peft
    import torch

    from testing.hf_checkpoints import load_hf_model

    torch.manual_seed(seed)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                             init_lora_weights=False, **lora)
    peft.get_peft_model(load_hf_model(base_folder), config).save_pretrained(folder)
    return folder


def write_case(case: str, folder: str) -> None:
    """The folders and recordings of the module docstring."""
    import peft

    from testing import decoder_reference
    from testing.genai_harness import hf_generate
    from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint

    base = make_hf_checkpoint(os.path.join(folder, "base"), "tiny-llama", initializer_range=0.2)
    adapters = {name: _adapter(base, os.path.join(folder, name), seed, targets, **lora)
                for seed, (name, (targets, lora)) in enumerate(ADAPTERS.items(), 1)}
    tokens = {}
    for name in [None, *adapters]:
        model = load_hf_model(base)
        if name:
            model = peft.PeftModel.from_pretrained(model, adapters[name]).eval()
        for pad in PADS:
            run = decoder_reference.record(model, model.config.vocab_size, pad=pad)
            decoder_reference.save(run, os.path.join(folder, run_name(name, pad) + ".npz"))
        tokens[name or "base"] = hf_generate(model, [PROMPT], NEW_TOKENS)[0]
    with open(os.path.join(folder, "tokens.json"), "w") as f:
        json.dump(tokens, f)
    phi3 = make_hf_checkpoint(os.path.join(folder, "phi3"), "tiny-phi3")
    _adapter(phi3, os.path.join(folder, "phi3-adapter"), 3, ["qkv_proj"])
