"""The torch side of peer_families_test (the reference_cases rule runs it at build time,
//rules:references.bzl): LFM2-Audio and VideoChat-Flash, two checkpoints transformers has
no class for.

Each checkpoint is written in the hub layout by testing/hf_checkpoints.make_hf_checkpoint
(mobius' numpy writer: every tensor random), plus random tensors under the names of the
parts the families leave unread (audio encoder / depthformer; video tower / projector),
so that the unread declarations are exercised. The reference is transformers' nearest
native model with the weights remapped (testing/remapped_references.py). Each case: ckpt/,
padded.npz + unpadded.npz (testing/checkpoint_runs.py) and transformers.json (greedy
tokens for the genai test).
"""

from __future__ import annotations

import os

NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids
LFM2_AUDIO, VIDEOCHAT = "tiny-lfm2-audio", "tiny-videochat_flash"

#: case -> (preset, config overrides)
CONFIGS: dict[str, tuple[str, dict]] = {
    "lfm2_audio": (LFM2_AUDIO, {}),
    "videochat_flash": (VIDEOCHAT, {}),
    "videochat_flash_tied": (VIDEOCHAT, {"tie_word_embeddings": True}),
}
CASES = sorted(CONFIGS)

#: preset -> (name, shape) of the tensors around the decoder that the family leaves unread
UNREAD = {
    LFM2_AUDIO: [("conformer.pre_encode.conv.0.weight", (8, 1, 3, 3)),
                 ("conformer.layers.0.self_attn.linear_q.weight", (40, 40)),
                 ("audio_adapter.model.0.weight", (64, 40)),
                 ("audio_embedding.embedding.weight", (2 * 2049, 64)),
                 ("depthformer.layers.0.operator.qkv_proj.weight", (72, 24)),
                 ("depth_linear.weight", (48, 64)), ("depth_linear.bias", (48,)),
                 ("depth_embeddings.1.embedding.weight", (2049, 24)),
                 ("codebook_offsets", (2,))],
    VIDEOCHAT: [("model.vision_tower.vision_tower.patch_embed.proj.weight", (40, 3, 1, 4, 4)),
                ("model.vision_tower.vision_tower.blocks.0.attn.qkv.weight", (120, 40)),
                ("model.mm_projector.mlp.0.weight", (64, 40)),
                ("model.mm_projector.mlp.0.bias", (64,)),
                ("model.frame_newline", (64,))],
}


def eos_ids(case: str) -> list[int]:
    """The ids genai stops at (suppressed alike on both sides): LFM2-Audio adds 128, 130."""
    return [2, 128, 130] if CONFIGS[case][0] == LFM2_AUDIO else [2]


def write_case(case: str, folder: str) -> None:
    from testing import checkpoint_runs, genai_harness
    from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint

    preset, overrides = CONFIGS[case]
    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, seed=7, **overrides)
    _add_unread(checkpoint, UNREAD[preset])
    model = load_hf_model(checkpoint)
    checkpoint_runs.record(model, folder)
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"), model,
                                     PROMPTS, NEW_TOKENS, eos_token_id=eos_ids(case))


def _add_unread(checkpoint: str, tensors: list[tuple[str, tuple[int, ...]]]) -> None:
    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = os.path.join(checkpoint, "model.safetensors")
    state = load_file(path)
    rng = np.random.default_rng(11)
    for name, shape in tensors:
        state[name] = (0.05 * rng.standard_normal(shape)).astype(np.float32)
    save_file(state, path, metadata={"format": "pt"})
