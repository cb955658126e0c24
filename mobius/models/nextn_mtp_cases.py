"""transformers' side of nextn_mtp_test (the reference_cases rule runs it at build time,
//rules:references.bzl): a tiny DeepSeek-V3 / GLM-4.5 / GLM-4.7-Flash checkpoint (every
parameter random) with a random MTP layer (testing/mtp_checkpoint.py) and the MTP module
run in torch.
"""

from __future__ import annotations

#: checkpoint: (preset, whether the MTP layer ships its own embed_tokens as DeepSeek-V3's
#: release does; without it the module embeds with the decoder's)
CONFIGS: dict[str, tuple[str, bool]] = {
    "deepseek_v3": ("tiny-deepseek-v3", True),
    "glm4_moe": ("tiny-glm4_moe", False),
    "glm4_moe_lite": ("tiny-glm4_moe_lite", True),
}

CASES = sorted(CONFIGS)


def _mtp_layer(ckpt: str, config):
    """transformers' decoder layer num_hidden_layers loaded from the MTP layer's tensors (a
    model one layer deeper reads them as its last layer, with transformers' own expert
    layout conversion; a sparse one where the config lists each layer's MLP), and that
    model's rotary embedding."""
    import copy

    from transformers import AutoModelForCausalLM

    deeper = copy.deepcopy(config)
    deeper.num_hidden_layers += 1
    deeper.num_nextn_predict_layers = 0
    if getattr(config, "mlp_layer_types", None) is not None:  # GLM-4.7-Flash: with experts
        deeper.mlp_layer_types = [*config.mlp_layer_types, "sparse"]
    model = AutoModelForCausalLM.from_pretrained(ckpt, config=deeper).eval()
    return model.model.layers[-1], model.model.rotary_emb


def _record_mtp(ckpt: str, folder: str, embed_copy: bool) -> None:
    """mtp.npz: the MTP module as DeepSeek-V3 describes it, on the decoder's final hidden
    states of a prompt: token t+1 and hidden state t at position t give
    shared_head.head(shared_head.norm(layer(eh_proj([enorm(emb(t+1)); hnorm(h_t)])))).
    Every part is transformers' own but the concatenation and the two projections."""
    import os

    import numpy as np
    import torch
    from safetensors.torch import load_file
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from testing.hf_checkpoints import load_hf_model

    model = load_hf_model(ckpt).eval()
    config = model.config
    config._attn_implementation = "eager"
    own = f"model.layers.{config.num_hidden_layers}."
    mtp = {k[len(own):]: v for k, v in load_file(os.path.join(ckpt, "model.safetensors")).items()
           if k.startswith(own)}
    layer, rotary = _mtp_layer(ckpt, config)
    norms = {}
    for name in ("enorm", "hnorm", "shared_head.norm"):
        norms[name] = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        norms[name].load_state_dict({"weight": mtp[f"{name}.weight"]})
    embedding = mtp["embed_tokens.weight"] if embed_copy else model.model.embed_tokens.weight
    ids = torch.randint(3, config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        hidden = model.model(ids).last_hidden_state[:, :-1]
        tokens = ids[:, 1:]
        fused = torch.cat([norms["enorm"](embedding[tokens]), norms["hnorm"](hidden)],
                          dim=-1) @ mtp["eh_proj.weight"].T
        positions = torch.arange(tokens.shape[1])[None]
        size = tokens.shape[1]
        mask = torch.full((size, size), float("-inf")).triu(1)[None, None]
        out = norms["shared_head.norm"](layer(fused, attention_mask=mask, position_ids=positions,
                                              position_embeddings=rotary(fused, positions)))
        logits = out @ mtp["shared_head.head.weight"].T
    np.savez(os.path.join(folder, "mtp.npz"), prompt=ids.numpy(), input_ids=tokens.numpy(),
             hidden_states=hidden.numpy(), logits=logits.numpy(), hidden_states_out=out.numpy())


def write_case(case: str, folder: str) -> None:
    """ckpt/ and mtp.npz."""
    from testing import checkpoint_runs, mtp_checkpoint
    from testing.hf_checkpoints import randomize_zero_tensors
    from testing.random_checkpoint import random_checkpoint

    preset, embed_copy = CONFIGS[case]

    def make(ckpt: str) -> str:
        randomize_zero_tensors(random_checkpoint(ckpt, preset))
        mtp_checkpoint.add_nextn_layer(ckpt, embed_copy)
        return ckpt

    _record_mtp(checkpoint_runs.write(folder, make, {}), folder, embed_copy)
