"""transformers' side of mamba2_test (//rules:references.bzl): GraniteMoeHybridMambaLayer,
every parameter random, run on the whole sequence at once with no cache (state.npz: its
state_dict; arrays.npz: hidden, mask with row 1 left-padded, y)."""

from __future__ import annotations

import numpy as np

HIDDEN, SEQ = 24, 11
#: (groups, chunk, proj_bias)
LAYERS = [(1, 256, False), (2, 4, True), (3, 3, False)]


def case_name(groups: int, chunk: int, proj_bias: bool) -> str:
    return f"groups{groups}_chunk{chunk}_{'bias' if proj_bias else 'no_bias'}"


CASES = sorted(case_name(*layer) for layer in LAYERS)


def _reference(groups: int, chunk: int, proj_bias: bool):
    import torch
    import transformers
    from transformers.models.granitemoehybrid import modeling_granitemoehybrid as m

    config = transformers.GraniteMoeHybridConfig(
        hidden_size=HIDDEN, mamba_n_heads=6, mamba_n_groups=groups, mamba_d_state=10,
        mamba_d_head=8, mamba_expand=2, mamba_d_conv=4, mamba_chunk_size=chunk,
        mamba_proj_bias=proj_bias, num_hidden_layers=1, layer_types=["linear_attention"])
    torch.manual_seed(0)
    layer = m.GraniteMoeHybridMambaLayer(config, 0).eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return layer


def write_case(case: str, folder: str) -> None:
    """state.npz and arrays.npz (see the module docstring)."""
    import torch

    from testing import recorded_arrays

    ref = _reference(*next(layer for layer in LAYERS if case_name(*layer) == case))
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((2, SEQ, HIDDEN)).astype(np.float32)
    mask = np.ones((2, SEQ), np.float32)
    mask[1, :3] = 0  # row 1 left-padded
    with torch.no_grad():
        y = ref(torch.from_numpy(hidden), attention_mask=torch.from_numpy(mask)).numpy()
    recorded_arrays.save(folder, {k: v.detach().numpy() for k, v in ref.state_dict().items()},
                         "state")
    recorded_arrays.save(folder, {"hidden": hidden, "mask": mask, "y": y})
