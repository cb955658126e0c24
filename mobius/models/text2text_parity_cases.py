"""transformers' side of text2text_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a checkpoint, and transformers' run of the padded
batch -- encoder states, cross K/V, per-step logits and self cache -- on its own greedy
tokens (the test feeds the package the same tokens)."""

from __future__ import annotations

import json
import os

import numpy as np

STEPS, PROMPT = 3, 4
LENGTHS = (9, 6)  # source lengths: the second row is right-padded

#: name -> (preset, overrides, untied lm_head: True adds one to a t5 checkpoint, "config"
#: is an override transformers itself honours)
CASES = {
    "t5_relu_tied": ("tiny-t5", {}, False),
    "t5_gated_untied": ("tiny-t5", {"feed_forward_proj": "gated-gelu",
                                    "relative_attention_num_buckets": 16,
                                    "relative_attention_max_distance": 10}, True),
    "t5_gated_silu_untied": ("tiny-t5", {"feed_forward_proj": "gated-silu"}, True),
    "mt5_tied": ("tiny-mt5", {}, False),
    "mt5_untied": ("tiny-mt5", {}, True),
    "bart_tied_scaled": ("tiny-bart", {}, False),
    "bart_untied_unscaled": ("tiny-bart", {"tie_word_embeddings": False, "scale_embedding": False,
                                           "activation_function": "relu"}, "config"),
    "marian_tied": ("tiny-marian", {}, False),
}


def inputs(vocab: int, seed: int = 0):
    """(source ids, source mask, decoder prompt): the right-padded batch of LENGTHS."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(4, vocab, size=(2, max(LENGTHS)), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, length in enumerate(LENGTHS):
        mask[row, :length] = 1
        ids[row, length:] = 0
    prompt = rng.integers(4, vocab, size=(2, PROMPT), dtype=np.int64)
    prompt[:, 0] = 0  # decoder_start_token_id
    return ids, mask, prompt


def write_case(case: str, folder: str) -> None:
    """ckpt/ (every zero tensor random; untied head where the case says), tied.json
    (whether transformers ties the head) and reference.npz (_hf_run)."""
    from testing.hf_checkpoints import (load_hf_model, make_hf_checkpoint,
                                        randomize_zero_tensors, untie_t5_head)

    preset, overrides, untied = CASES[case]
    checkpoint = os.path.join(folder, "ckpt")
    make_hf_checkpoint(checkpoint, preset, **overrides)
    randomize_zero_tensors(checkpoint)
    if untied is True:
        untie_t5_head(checkpoint)
    model = load_hf_model(checkpoint)
    shared = model.get_input_embeddings().weight
    with open(os.path.join(folder, "tied.json"), "w") as f:
        json.dump(model.lm_head.weight.data_ptr() == shared.data_ptr(), f)
    ids, mask, prompt = inputs(model.config.vocab_size)
    np.savez(os.path.join(folder, "reference.npz"), ids=ids, mask=mask, prompt=prompt,
             **_hf_run(model, ids, mask, prompt))


def _hf_run(model, ids, mask, prompt) -> dict[str, np.ndarray]:
    """transformers, STEPS greedy steps: encoder states, cross K/V, and per step the
    logits, self cache and the token chosen (arrays named for np.savez)."""
    import torch

    arrays = {}
    with torch.no_grad():
        mask_t = torch.from_numpy(mask)
        encoded = model.get_encoder()(input_ids=torch.from_numpy(ids), attention_mask=mask_t)
        arrays["states"] = encoded.last_hidden_state.numpy()
        cache, step_ids = None, torch.from_numpy(prompt)
        for step in range(STEPS + 1):
            out = model(encoder_outputs=encoded, attention_mask=mask_t, decoder_input_ids=step_ids,
                        cache=cache, use_cache=True)
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            if step == 0:  # what transformers cached of the encoder states
                arrays.update(_layers("cross", cache.cross_attention_cache.layers))
            arrays[f"logits_{step}"] = out.logits.numpy()
            arrays.update(_layers(f"self_{step}", cache.self_attention_cache.layers))
            if step < STEPS:
                token = out.logits[:, -1].argmax(-1)[:, None].numpy().astype(np.int64)
                arrays[f"token_{step}"] = token
                step_ids = torch.from_numpy(token)
    return arrays


def _layers(prefix: str, layers) -> dict[str, np.ndarray]:
    """Each layer's keys then values, as ``<prefix>_<n>`` in that order."""
    tensors = [t for layer in layers for t in (layer.keys, layer.values)]
    return {f"{prefix}_{n}": t.numpy().copy() for n, t in enumerate(tensors)}
