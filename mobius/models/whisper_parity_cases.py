"""transformers' side of whisper_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a checkpoint (every bias and both position tables
re-randomized) and transformers' run on its own greedy tokens -- encoder states, cross
K/V, per-step logits and self cache; for "default" also the bare WhisperModel save."""

from __future__ import annotations

import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS

STEPS, PROMPT = 3, 4
CASES = {
    "default": {},  # 2 + 2 layers, 4 heads, proj_out tied to the token embedding
    # distil-whisper's shape: deep encoder, shallow decoder; encoder heads (6 of 8) differ
    # from the decoder's (4 of 12), whose cross K/V the encoder outputs; untied proj_out
    "distil_untied": {"encoder_layers": 3, "decoder_layers": 1, "encoder_attention_heads": 6,
                      "tie_word_embeddings": False},
}


def inputs(vocab_size: int, raw: dict, seed=0):
    """(log-mel features [2, mels, frames], decoder prompt [2, PROMPT]) for a case's config
    overrides ``raw``."""
    rng = np.random.default_rng(seed)
    preset = TINY_PRESETS["tiny-whisper"]
    frames = 2 * raw.get("max_source_positions", preset["max_source_positions"])
    mels = raw.get("num_mel_bins", preset["num_mel_bins"])
    features = rng.standard_normal((2, mels, frames)).astype(np.float32)
    prompt = rng.integers(4, vocab_size, size=(2, PROMPT), dtype=np.int64)
    prompt[:, 0] = preset["decoder_start_token_id"]
    return features, prompt


def write_case(case: str, folder: str) -> None:
    """ckpt/, reference.npz (_hf_run) and, for "default", bare/ (WhisperModel's own save:
    encoder.* / decoder.*, no proj_out)."""
    import torch

    from mobius.tiny.tokenizer import write_tiny_tokenizer
    from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint

    checkpoint = os.path.join(folder, "ckpt")
    make_hf_checkpoint(checkpoint, "tiny-whisper", **CASES[case])
    model = load_hf_model(checkpoint)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith("bias") or "embed_positions" in param_name:
                param.add_(0.1 * torch.randn(param.shape, generator=generator))
    model.save_pretrained(checkpoint, safe_serialization=True)
    features, prompt = inputs(model.config.vocab_size, CASES[case])
    np.savez(os.path.join(folder, "reference.npz"), features=features, prompt=prompt,
             **_hf_run(model, features, prompt))
    if case == "default":
        bare = os.path.join(folder, "bare")
        model.model.save_pretrained(bare, safe_serialization=True)
        write_tiny_tokenizer(bare, model.config.vocab_size)


def _hf_run(model, features, prompt) -> dict[str, np.ndarray]:
    """transformers, STEPS greedy steps: encoder states, cross K/V (the decoder layers'
    encoder_attn projections of the states), and per step the logits, self cache and the
    token chosen (arrays named for np.savez)."""
    import torch

    arrays = {}
    with torch.no_grad():
        encoded = model.model.encoder(torch.from_numpy(features))
        states = encoded.last_hidden_state
        arrays["states"] = states.numpy()
        batch, length = states.shape[:2]
        cross = [proj(states).view(batch, length, layer.encoder_attn.num_heads,
                                   layer.encoder_attn.head_dim).transpose(1, 2).numpy()
                 for layer in model.model.decoder.layers
                 for proj in (layer.encoder_attn.k_proj, layer.encoder_attn.v_proj)]
        arrays.update({f"cross_{n}": kv for n, kv in enumerate(cross)})
        cache, ids = None, torch.from_numpy(prompt)
        for step in range(STEPS + 1):
            out = model(encoder_outputs=encoded, decoder_input_ids=ids, cache=cache, use_cache=True)
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            arrays[f"logits_{step}"] = out.logits.numpy()
            presents = [t.numpy().copy() for layer in cache.self_attention_cache.layers
                        for t in (layer.keys, layer.values)]
            arrays.update({f"self_{step}_{n}": kv for n, kv in enumerate(presents)})
            if step < STEPS:
                token = out.logits[:, -1].argmax(-1)[:, None].numpy().astype(np.int64)
                arrays[f"token_{step}"] = token
                ids = torch.from_numpy(token)
    return arrays
