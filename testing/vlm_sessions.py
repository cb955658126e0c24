"""A saved vision-language package's three onnxruntime sessions, chained as
onnxruntime-genai runs them: the vision model's features go through the embedding
model, the decoder prefills on the merged embeddings, then each greedy token goes
back through the embedding model (no image features) with present.* fed back as
past_key_values.*. The VLM parity tests subclass :class:`Sessions` for what their
family's vision inputs, embedding inputs or decoder state add."""

from __future__ import annotations

import os

import numpy as np

from testing.model_runs import ort_session
from testing.parity import compare_logits, position_ids_for


class Sessions:
    """vision.onnx, embedding.onnx and model.onnx of the package saved at ``path``."""

    def __init__(self, path: str, config):
        self.path, self.config = path, config
        self.vision, self.embedding, self.decoder = (
            ort_session(os.path.join(path, f"{name}.onnx"))
            for name in ("vision", "embedding", "model"))

    def embed(self, input_ids, image_features):
        return self.embedding.run(None, {"input_ids": input_ids,
                                         "image_features": image_features})[0]

    def no_features(self) -> np.ndarray:
        """The image_features of a text-only (decode) step: [0, width]."""
        return np.zeros((0, self.config.hidden_size), np.float32)

    def decode(self, embeds, attention_mask, position_ids, past, extra=None):
        """(logits, presents) of one decoder run; ``position_ids`` None: numbered over the
        mask; ``past`` None: empty KV caches; ``extra``: more feeds (e.g. input_ids)."""
        config = self.config
        if position_ids is None:
            position_ids = position_ids_for(attention_mask, embeds.shape[1])
        feeds = {"inputs_embeds": embeds, "attention_mask": attention_mask,
                 "position_ids": position_ids, **(extra or {})}
        for i in range(config.num_hidden_layers):
            for j, kind in enumerate(("key", "value")):
                feeds[f"past_key_values.{i}.{kind}"] = past[i][j] if past else np.zeros(
                    (embeds.shape[0], config.num_key_value_heads, 0, config.head_dim), np.float32)
        names = [o.name for o in self.decoder.get_outputs()]
        out = dict(zip(names, self.decoder.run(None, feeds)))
        return out["logits"], [(out[f"present.{i}.key"], out[f"present.{i}.value"])
                               for i in range(config.num_hidden_layers)]

    def step(self, input_ids, embeds, attention_mask, position_ids, past):
        """One decoder run for these tokens (a family whose decoder reads its token ids
        too passes them on)."""
        return self.decode(embeds, attention_mask, position_ids, past)

    def greedy(self, input_ids, embeds, attention_mask, steps: int, position_ids=None,
               tokens=None):
        """(per-step logits, tokens): the prefill on ``embeds``, then ``steps`` decode
        steps on the greedy tokens, or on ``tokens`` (transformers' recorded greedy tokens,
        testing/vlm_reference.py) where given; explicit prefill ``position_ids``
        ([..., batch, seq]) continue at each row's last position + 1."""
        logits, past = self.step(input_ids, embeds, attention_mask, position_ids, None)
        steps_logits, fed, mask = [logits], [], attention_mask
        for step in range(steps):
            token = (steps_logits[-1][:, -1].argmax(-1)[:, None].astype(np.int64)
                     if tokens is None else tokens[step])
            fed.append(token)
            mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
            positions = None if position_ids is None else position_ids[..., -1:] + 1 + step
            logits, past = self.step(token, self.embed(token, self.no_features()), mask,
                                     positions, past)
            steps_logits.append(logits)
        return steps_logits, fed


class StatefulSessions(Sessions):
    """Sessions whose decoder state is every past_* input it declares (KV caches, a
    hybrid's conv and recurrent states), zero-length or zero at the prefill and fed back by
    name: ``past`` is the previous run's present.* keyed by the input it feeds."""

    def __init__(self, path: str, config):
        super().__init__(path, config)
        self.past = [i for i in self.decoder.get_inputs() if i.name.startswith("past_")]

    def decode(self, embeds, attention_mask, position_ids, past, extra=None):
        if position_ids is None:
            position_ids = position_ids_for(attention_mask, embeds.shape[1])
        feeds = {"inputs_embeds": embeds, "attention_mask": attention_mask,
                 "position_ids": position_ids, **(extra or {})}
        for spec in self.past:  # KV [batch, kv, 0, d]; states at their full, zero shape
            dims = [embeds.shape[0]] + [0 if isinstance(d, str) else d for d in spec.shape[1:]]
            feeds[spec.name] = past[spec.name] if past else np.zeros(dims, np.float32)
        names = [o.name for o in self.decoder.get_outputs()]
        out = dict(zip(names, self.decoder.run(None, feeds)))
        return out["logits"], {k.replace("present.", "past_key_values.", 1): v
                               for k, v in out.items() if k.startswith("present.")}


def assert_chain_matches(pkg: Sessions, input_ids, attention_mask, ours, reference,
                         tolerance: float, label: str, exact_merge: bool = True) -> None:
    """The chain's (image features, prefill inputs_embeds, per-step logits) ``ours`` vs
    transformers' (features, merged embeddings, logits) ``reference``, each within
    ``tolerance``; with ``exact_merge`` the embedding model's merge of transformers' own
    features must be exact (a lookup and a scatter)."""
    features, embeds, steps = ours
    hf_features, hf_merged, hf_steps = reference
    assert features.shape == hf_features.shape
    vision_diff = float(np.abs(features - hf_features).max())
    assert vision_diff <= tolerance, f"{label}: vision {vision_diff:.3g}"
    if exact_merge:
        np.testing.assert_array_equal(pkg.embed(input_ids, hf_features), hf_merged)
    embeds_diff = float(np.abs(embeds - hf_merged).max())  # through our vision model
    assert embeds_diff <= tolerance, f"{label}: embeddings {embeds_diff:.3g}"
    diff = compare_logits(steps, hf_steps, attention_mask)
    assert diff <= tolerance, f"{label}: logits {diff:.3g}"
