"""A ``--mtp`` package's drafter checked two ways, shared by the MTP tests
(mobius/models/qwen3_5_mtp_test.py, nextn_mtp_test.py): the head's graph against a
recorded reference run, and onnxruntime-genai's speculative decoding against plain greedy."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import onnxruntime_genai as og


def assert_head_matches(package: str, recorded: dict, atol: float = 1e-4) -> None:
    """mtp/model.onnx (f32), on an empty cache, gives the recorded logits and fed-back
    hidden states for the recorded tokens and decoder hidden states."""
    session = ort.InferenceSession(os.path.join(package, "mtp", "model.onnx"))
    tokens = recorded["input_ids"]
    kv = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
          for i in session.get_inputs() if i.name.startswith("past_key_values.")}
    logits, hidden = session.run(["logits", "hidden_states_out"], {
        "input_ids": tokens, "hidden_states": recorded["hidden_states"],
        "attention_mask": np.ones_like(tokens), "position_ids": np.arange(tokens.shape[1])[None],
        **kv})
    np.testing.assert_allclose(logits, recorded["logits"], atol=atol, rtol=0)
    np.testing.assert_allclose(hidden, recorded["hidden_states_out"], atol=atol, rtol=0)


def _greedy(make, model, prompt, new_tokens: int):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
    generator = make(params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    return generator


def assert_speculative_equals_plain(package: str, prompt: np.ndarray, new_tokens: int) -> dict:
    """og.MtpGenerator on the package (f16) emits plain og.Generator's greedy tokens, token
    for token, with the head drafting every round; returns genai's statistics."""
    model, head = og.Model(package), og.Model(os.path.join(package, "mtp"))
    prompt = prompt.astype(np.int32)
    plain = _greedy(lambda p: og.Generator(model, p), model, prompt, new_tokens).get_sequence(0)
    speculative = _greedy(lambda p: og.MtpGenerator(model, head, p), model, prompt, new_tokens)
    np.testing.assert_array_equal(np.asarray(speculative.get_sequence()), np.asarray(plain))
    assert len(plain) == len(prompt) + new_tokens
    stats = speculative.get_stats()
    assert stats["mtp_failures"] == 0 and stats["tokens_emitted"] == new_tokens, stats
    assert stats["draft_forward_passes"] >= stats["rounds"] > 0, stats
    assert stats["draft_tokens_evaluated"] == stats["trials"] > 0, stats
    assert 0 <= stats["draft_tokens_accepted"] <= stats["draft_tokens_evaluated"], stats
    return stats
