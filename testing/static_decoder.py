"""Greedy generation with a static-shape decoder (mobius/rewrite/static_shapes.py).

onnxruntime-genai 0.18 cannot drive a float static decoder: its windowed cache for
QNN (``sliding_window`` in genai_config) takes uint8 KV only ("Expected input data
type to be uint8_t for WindowedKeyValueCache"), and its other caches feed dynamic
shapes. This is the loop such a runtime runs, through plain onnxruntime sessions:
the prompt in chunks of the graph's S tokens (the first one left-padded so that the
last slot, whose logits the graph returns, is always a real token), one token per
decode step in the last slot of a padded chunk, and a cache of the last P real slots
of each present, left-padded, its empty slots 0 in attention_mask.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

_NUMPY = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
          "tensor(float16)": np.float16}


#: the inputs the loop feeds besides the KV cache; a recurrent state (a hybrid's conv / SSM
#: cache) is not one of them: the pad tokens of a chunk would run through the recurrence
FED = ("input_ids", "attention_mask", "position_ids")


def is_kv(name: str) -> bool:
    return name.startswith("past_key_values.") and name.endswith((".key", ".value"))


def undriven(names) -> list[str]:
    """The inputs of ``names`` the loop does not feed (a hybrid's state, a VLM's embeddings)."""
    return [n for n in names if n not in FED and not is_kv(n)]


def greedy(run: Callable[[dict], dict], inputs, prompt: list[int], max_new_tokens: int,
           forced: list[int] | None = None, logits: list | None = None) -> list[int]:
    """``prompt`` + greedy tokens (``forced`` ones instead, where given); ``run(feeds) ->
    {output name: array}`` runs the graph once and ``inputs`` is its
    ``session.get_inputs()`` (static shapes). Appends each real token's logits to
    ``logits``."""
    spec = {i.name: (list(i.shape), _NUMPY[i.type]) for i in inputs}
    other = undriven(spec)
    if other:  # a hybrid's recurrent state, a VLM decoder's embeddings
        raise ValueError(f"static decoder inputs {other} are not driven here (a recurrent "
                         f"state would take a chunk's pad tokens)")
    chunk = spec["input_ids"][0][1]
    past = spec["attention_mask"][0][1] - chunk
    caches = {name: np.zeros(shape, kind) for name, (shape, kind) in spec.items() if is_kv(name)}
    valid = np.zeros(past, bool)
    tokens = list(prompt)
    pending = [tokens[:len(prompt) % chunk or chunk]]
    pending += [tokens[i:i + chunk] for i in range(len(pending[0]), len(prompt), chunk)]
    done = 0  # tokens in the cache
    while len(tokens) < len(prompt) + max_new_tokens:
        new = pending.pop(0) if pending else tokens[-1:]
        pad = chunk - len(new)
        mask = np.concatenate([valid, np.arange(chunk) >= pad])
        feeds = {"input_ids": np.array([[0] * pad + new]),
                 "attention_mask": mask[None].astype(np.int64),
                 "position_ids": np.array([[done] * pad + list(range(done, done + len(new)))]),
                 **caches}
        feeds = {name: value.astype(spec[name][1]) for name, value in feeds.items() if name in spec}
        out = run(feeds)
        keep = np.flatnonzero(mask)[-past:]
        for name in caches:
            present = out[name.replace("past_key_values.", "present.")]
            caches[name] = np.zeros_like(caches[name])
            caches[name][:, :, past - len(keep):] = present[:, :, keep]
        valid = np.arange(past) >= past - len(keep)
        done += len(new)
        if not pending:
            if logits is not None:
                logits.append(out["logits"][0, -1].astype(np.float32))
            step = len(tokens) - len(prompt)
            tokens.append(int(np.argmax(out["logits"][0, -1])) if forced is None
                          else forced[step])
    return tokens


def static_vs_generic(static_model: bytes, generic_model: bytes, config, dtype: str,
                      prompt_len: int = 10, steps: int = 3, seed: int = 0):
    """Logits of a static decoder driven by ``greedy`` against the generic (dynamic) graph's
    on the same tokens, prefill + ``steps`` decode steps, both on onnxruntime's CPU EP:
    an ep_parity.Diff of the logits (the caches' layouts differ; each step reads them)."""
    from testing import ep_parity, parity

    input_ids, mask = parity.make_batch(config.vocab_size, prompt_len, 0, seed)
    input_ids, mask = input_ids[:1], mask[:1]
    reference, chosen = ep_parity.run(ep_parity.session(generic_model), config, input_ids, mask,
                                      steps, ep_parity.np_dtype(dtype))
    expected = [r[0, -1] for r in reference.logits]
    session = ep_parity.session(static_model)
    names = [o.name for o in session.get_outputs()]
    got: list = []
    greedy(lambda feeds: dict(zip(names, session.run(None, feeds))), session.get_inputs(),
           [int(t) for t in input_ids[0]], steps + 1, forced=[int(t[0, 0]) for t in chosen] + [0],
           logits=got)
    per_step = [float(np.abs(a - b).max()) for a, b in zip(got, expected)]
    scale = float(max(np.abs(e).max() for e in expected))
    return ep_parity.Diff(max(per_step), 0.0, scale, 1.0, per_step)
