"""transformers' side of gemma4_audio_test (//rules:references.bzl): per case a tiny
Gemma4AudioModel + Gemma4MultimodalEmbedder with every parameter random (the clip
bounds finite and active), two clips of log-mel frames (the second padded), and
transformers' real soft tokens (get_audio_features, padding positions dropped).
"""

from __future__ import annotations

import numpy as np

TEXT_HIDDEN = 24
FRAMES, PAD = 37, 11  # clip 1 has FRAMES - PAD real frames
#: a tiny audio_config; mel bins reduce to subsampling_conv_channels[0] // 4
BASE = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
        "subsampling_conv_channels": [8, 4], "conv_kernel_size": 3, "residual_weight": 0.7,
        "attention_chunk_size": 4, "attention_context_left": 6, "attention_context_right": 0,
        "attention_logit_cap": 3.0, "use_clipped_linears": True, "output_proj_dims": 20,
        "rms_norm_eps": 1e-5, "hidden_act": "silu", "gradient_clipping": 0.8}
MEL = 8
#: case: overrides of BASE, each a switch the tower reads
OVERRIDES: dict[str, dict] = {
    "default": {},
    "future": {"attention_context_right": 3, "attention_chunk_size": 3},
    "plain": {"use_clipped_linears": False, "hidden_act": "gelu", "gradient_clipping": 1e10,
              "conv_kernel_size": 5, "attention_logit_cap": 50.0},
}
CASES = sorted(OVERRIDES)


def config(case: str) -> dict:
    return {**BASE, **OVERRIDES[case]}


def _model(case: str):
    import torch
    from transformers.models.gemma4 import modeling_gemma4 as m
    from transformers.models.gemma4.configuration_gemma4 import (Gemma4AudioConfig,
                                                                  Gemma4TextConfig)

    audio = Gemma4AudioConfig(**config(case))
    text = Gemma4TextConfig(hidden_size=TEXT_HIDDEN)
    tower, embed = m.Gemma4AudioModel(audio).eval(), m.Gemma4MultimodalEmbedder(audio, text)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, tensor in [*tower.state_dict().items(), *embed.state_dict().items()]:
            if name.endswith(("_min", "_max")):  # bounds that clip some values
                tensor.fill_(-1.5 if name.endswith("_min") else 1.5)
            else:
                tensor.copy_(0.5 * torch.randn(tensor.shape, generator=gen))
    return tower, embed


def write_case(case: str, folder: str) -> None:
    """arrays.npz: the weights (``audio_tower.*``, ``embed_audio.*``), features, mask,
    and the real soft tokens."""
    import torch

    from testing import recorded_arrays

    tower, embed = _model(case)
    rng = np.random.default_rng(1)
    features = rng.standard_normal((2, FRAMES, MEL)).astype(np.float32)
    mask = np.ones((2, FRAMES), bool)
    mask[1, FRAMES - PAD:] = False
    with torch.no_grad():
        out = tower(torch.from_numpy(features), torch.from_numpy(mask))
        tokens = embed(out.last_hidden_state)[out.attention_mask]
    arrays = {f"audio_tower.{k}": v.numpy() for k, v in tower.state_dict().items()}
    arrays.update({f"embed_audio.{k}": v.numpy() for k, v in embed.state_dict().items()})
    recorded_arrays.save(folder, {**arrays, "features": features, "mask": mask,
                                  "tokens": tokens.numpy()})
