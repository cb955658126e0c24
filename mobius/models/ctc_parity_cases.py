"""transformers' side of ctc_parity_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per variant, a checkpoint and transformers' logits on it."""

from __future__ import annotations

import os

import numpy as np

from mobius.models import wav2vec2

#: case -> (family, config overrides of its tiny preset)
VARIANTS = {
    "wav2vec2": (wav2vec2.FAMILY, {}),  # group norm, post-norm, no conv bias, kernel 6
    "hubert": (wav2vec2.HUBERT, {}),  # layer norm + mask, stable, conv bias
    # encoder eps 1e-2 (the conv layers' LayerNorms keep PyTorch's 1e-5)
    "wav2vec2-layer-stable-bias": (wav2vec2.FAMILY, {
        "feat_extract_norm": "layer", "do_stable_layer_norm": True, "conv_bias": True,
        "layer_norm_eps": 1e-2}),
    # the feature encoder's activation is its own (relu here), not hidden_act
    "wav2vec2-layer-postnorm-kernel5": (wav2vec2.FAMILY, {
        "feat_extract_norm": "layer", "num_conv_pos_embeddings": 5,
        "num_conv_pos_embedding_groups": 2, "feat_extract_activation": "relu"}),
    "hubert-group-postnorm-no-proj-norm": (wav2vec2.HUBERT, {
        "feat_extract_norm": "group", "do_stable_layer_norm": False,
        "feat_proj_layer_norm": False, "hidden_act": "gelu_new"}),
    "hubert-conv-pos-batch-norm": (wav2vec2.HUBERT, {"conv_pos_batch_norm": True}),
}
CASES = sorted(VARIANTS)


def write_case(case: str, folder: str) -> None:
    """ckpt/ (BatchNorm statistics random too) and reference.npz (testing/ctc_runs.record)."""
    from testing import ctc_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    family, overrides = VARIANTS[case]
    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), family.tiny_preset,
                                    **overrides)
    _random_statistics(checkpoint)
    ctc_runs.save(ctc_runs.record(checkpoint), os.path.join(folder, "reference.npz"))


def _random_statistics(folder: str) -> str:
    """BatchNorm's running statistics are buffers (transformers saves 0 and 1, which the
    parameter randomization leaves): random too, so dropping them cannot pass."""
    from safetensors.numpy import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    rng = np.random.default_rng(3)
    stats = [n for n in tensors if n.endswith((".running_mean", ".running_var"))]
    for name in stats:
        noise = rng.uniform(0.5, 1.5, tensors[name].shape) if name.endswith("var") else (
            0.2 * rng.standard_normal(tensors[name].shape))
        tensors[name] = noise.astype(np.float32)
    if stats:
        save_file(tensors, path, metadata={"format": "pt"})
    return folder
