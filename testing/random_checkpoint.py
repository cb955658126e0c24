"""A transformers-written tiny checkpoint in which every parameter is random.

transformers starts biases at 0 and norm weights/shifts at 1/0, where a dropped
or misplaced one goes unseen; this perturbs every parameter after
testing/hf_checkpoints.make_hf_checkpoint has written the checkpoint.
"""

from __future__ import annotations

from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint


def random_checkpoint(folder: str, preset: str, seed: int = 7, **overrides) -> str:
    """make_hf_checkpoint(folder, preset, **overrides), then N(0, 0.1) added to every parameter."""
    import torch

    make_hf_checkpoint(folder, preset, **overrides)
    model = load_hf_model(folder)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, param in model.named_parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=generator))
    model.save_pretrained(folder, safe_serialization=True)
    return folder

