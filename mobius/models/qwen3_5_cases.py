"""transformers' side of qwen3_5_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each checkpoint (every parameter random) with transformers'
run on a batch of an unpadded and a left-padded row (testing/checkpoint_runs.py).
"""

from __future__ import annotations

PRESET = "tiny-qwen3_5"

#: checkpoint: config overrides of the preset (DeltaNet x2, gated attention, DeltaNet;
#: 2 key heads serving 6 value heads; conv 4; M-RoPE sections [1, 1, 0] interleaved).
CONFIGS: dict[str, dict] = {
    "base": {},
    # attention every 2nd layer from full_attention_interval, attention biases, one value
    # head per key head, half-rotary heads whose M-RoPE sections are split another way
    # and not interleaved (text positions: the same RoPE), a conv kernel of 3, tied
    # embeddings
    "interval2_biases": {
        "layer_types": None, "full_attention_interval": 2, "attention_bias": True,
        "linear_num_value_heads": 2, "linear_conv_kernel_dim": 3, "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.5, "mrope_section": [2, 2, 0],
                            "mrope_interleaved": False}},
    # the base checkpoint plus a multi-token-prediction head, as released checkpoints ship
    "mtp": {},
}

CASES = sorted(CONFIGS)

#: the decoder layer whose shapes the MTP head's layer takes (the preset's attention layer)
ATTENTION_LAYER = "model.layers.2."


def _record_mtp(ckpt: str, folder: str) -> None:
    """mtp.npz: the head run in torch from transformers' own parts (its decoder layer, the
    (1 + w) RMSNorm, the RoPE) on the decoder's final hidden states of a prompt: token
    t+1 with hidden state t at head position t."""
    import copy
    import os

    import numpy as np
    import torch
    from safetensors.torch import load_file
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    from testing.hf_checkpoints import load_hf_model

    model = load_hf_model(ckpt).eval()
    config = copy.deepcopy(model.config)
    config.layer_types, config.num_hidden_layers = ["full_attention"], 1
    config._attn_implementation = "eager"
    mtp = {k[4:]: v for k, v in load_file(os.path.join(ckpt, "model.safetensors")).items()
           if k.startswith("mtp.")}
    layer = qwen.Qwen3_5DecoderLayer(config, 0).eval()
    layer.load_state_dict({k[9:]: v for k, v in mtp.items() if k.startswith("layers.0.")})
    norms = {}
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        norms[name] = qwen.Qwen3_5RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        norms[name].load_state_dict({"weight": mtp[f"{name}.weight"]})
    ids = torch.randint(3, config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        hidden = model.model(ids).last_hidden_state[:, :-1]
        tokens = ids[:, 1:]
        fused = torch.cat([norms["pre_fc_norm_embedding"](model.model.embed_tokens(tokens)),
                           norms["pre_fc_norm_hidden"](hidden)], dim=-1) @ mtp["fc.weight"].T
        positions = torch.arange(tokens.shape[1])[None]
        rope = model.model.rotary_emb(fused, positions)
        size = tokens.shape[1]
        mask = torch.full((size, size), float("-inf")).triu(1)[None, None]
        out = norms["norm"](layer(fused, rope, attention_mask=mask, position_ids=positions))
        logits = model.lm_head(out)
    np.savez(os.path.join(folder, "mtp.npz"), prompt=ids.numpy(), input_ids=tokens.numpy(),
             hidden_states=hidden.numpy(), logits=logits.numpy(), hidden_states_out=out.numpy())


def write_case(case: str, folder: str) -> None:
    """ckpt/ and padded.npz."""
    from testing import checkpoint_runs, mtp_checkpoint
    from testing.random_checkpoint import random_checkpoint

    def make(ckpt: str) -> str:
        random_checkpoint(ckpt, PRESET, **CONFIGS[case])
        if case == "mtp":
            mtp_checkpoint.add_mtp_head(ckpt, ATTENTION_LAYER)
        return ckpt

    ckpt = checkpoint_runs.write(folder, make, {"padded": checkpoint_runs.RUNS["padded"]})
    if case == "mtp":
        _record_mtp(ckpt, folder)
