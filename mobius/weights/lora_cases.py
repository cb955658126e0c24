"""transformers + peft side of lora_test (//rules:references.bzl), one case "peft":

base/ (tiny-llama, every parameter random) and base.npz (its standard parity run,
testing/decoder_reference); per LORAS name a random (not zero-initialised) adapter saved by
peft itself (<name>/) with peft's run adapter on, unmerged (<name>.npz) and merged by peft
(<name>-merged.npz); "refused/" (seed 2), the adapter the refusal tests edit; "other/", an
adapter for a 3-layer tiny-llama, which the base checkpoint lacks layer 2 of.
"""

from __future__ import annotations

import os
import tempfile

TARGETS = ["q_proj", "v_proj", "down_proj"]
#: adapter name: (seed, LoraConfig extras)
LORAS = {"lora": (1, {}), "rslora": (1, {"use_rslora": True})}
CASES = ["peft"]


def _adapter(base_folder: str, folder: str, seed: int, **lora) -> str:
    """A random (not zero-initialised) LoRA adapter saved by peft itself."""
    import peft
    import torch

    from testing.hf_checkpoints import load_hf_model

    torch.manual_seed(seed)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS,
                             init_lora_weights=False, **lora)
    peft.get_peft_model(load_hf_model(base_folder), config).save_pretrained(folder)
    return folder


def write_case(case: str, folder: str) -> None:
    """The folders and recordings of the module docstring."""
    import peft

    from testing import decoder_reference
    from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint

    def record(model, name):
        run = decoder_reference.record(model, model.config.vocab_size)
        decoder_reference.save(run, os.path.join(folder, name + ".npz"))

    base = make_hf_checkpoint(os.path.join(folder, "base"), "tiny-llama")
    record(load_hf_model(base), "base")
    for name, (seed, lora) in LORAS.items():
        adapter = _adapter(base, os.path.join(folder, name), seed, **lora)
        with_adapter = peft.PeftModel.from_pretrained(load_hf_model(base), adapter).eval()
        record(with_adapter, name)
        record(with_adapter.merge_and_unload(), name + "-merged")
    _adapter(base, os.path.join(folder, "refused"), seed=2)
    with tempfile.TemporaryDirectory() as other:
        make_hf_checkpoint(other, "tiny-llama", num_hidden_layers=3)
        _adapter(other, os.path.join(folder, "other"), seed=3)
