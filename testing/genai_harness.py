"""Greedy generation with onnxruntime-genai (on a saved package) and transformers (on its checkpoint).

Both functions take the same prompts -- a list of token-id rows, which may
have different lengths -- and return, per row, the ids of the newly
generated tokens only (prompt and padding stripped).

Padding. The two libraries pad a batch on opposite sides, and each is
driven here the way it expects:

* onnxruntime-genai (0.18) takes a batch **right**-padded with the model's
  ``pad_token_id`` (this is what ``og.Tokenizer.encode_batch`` produces). It
  derives ``attention_mask`` from the pad tokens (0 on padding), numbers
  ``position_ids`` over the real tokens only, reads each row's next-token
  logits at its last real token, and appends generated tokens after the
  padded width with mask 1. Left-padded input is *not* recognised: leading
  pad tokens get mask 1 and are attended to like real tokens.
* transformers' ``generate`` takes a **left**-padded batch plus
  ``attention_mask``, and derives ``position_ids`` from the mask.

Either way a row sees exactly its own tokens at positions 0, 1, 2, ... so
the greedy continuations must agree; the KV cache merely holds the padding
in a different place, masked out. Consequently a prompt must not contain
the pad id (genai would mask it); :func:`genai_generate` rejects that.
Caveat for sliding-window attention: genai's layout leaves a masked gap
between a short row's prompt and its generated tokens, so a graph that
measures the window in cache slots (rather than in positions, i.e. the
cumulative count of attention_mask) sees fewer real tokens in that row than
transformers does; batch-1 runs are unaffected.

EOS. With ``suppress_eos=True`` (the default) neither side may stop before
``max_new_tokens``: genai gets ``min_length == max_length`` and transformers
gets ``min_new_tokens == max_new_tokens``; both implement this by setting
the EOS logits to -inf before the argmax, so a step where EOS would have
won picks the same runner-up on both sides. With ``suppress_eos=False``
each row is cut right after its first EOS on both sides.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

Prompts = Sequence[Sequence[int]]


def pad_batch(prompts: Prompts, pad_token_id: int, side: str) -> tuple[np.ndarray, np.ndarray]:
    """Pads rows to one width on ``side`` ("left"/"right"); returns int64 ids and the 0/1 mask."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', not {side!r}")
    if not prompts or any(len(row) == 0 for row in prompts):
        raise ValueError("need at least one prompt, and no empty prompt")
    width = max(len(row) for row in prompts)
    ids = np.full((len(prompts), width), pad_token_id, dtype=np.int64)
    mask = np.zeros((len(prompts), width), dtype=np.int64)
    for i, row in enumerate(prompts):
        sl = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[i, sl] = row
        mask[i, sl] = 1
    return ids, mask


def _cut_after_eos(tokens: list[int], eos: set[int]) -> list[int]:
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


def _as_set(eos) -> set[int]:
    if eos is None:
        return set()
    return {int(e) for e in eos} if isinstance(eos, (list, tuple)) else {int(eos)}


def genai_config(package_dir: str) -> dict:
    with open(f"{package_dir}/genai_config.json") as f:
        return json.load(f)


def genai_generate(
    package_dir: str,
    prompts: Prompts,
    max_new_tokens: int,
    *,
    suppress_eos: bool = True,
    config_overlay: dict | None = None,
    intra_op_num_threads: int | None = 1,
) -> list[list[int]]:
    """Greedy-generates ``max_new_tokens`` per prompt with onnxruntime-genai.

    ``config_overlay`` is merged into genai_config.json at load time
    (``og.Config.overlay``), e.g. ``{"model": {"eos_token_id": 7}}``.
    ``intra_op_num_threads`` overrides the session's thread count: 1 by default, several
    times faster for tiny models and immune to busy machines (testing/session_threads.py);
    None keeps the package's own.
    """
    import onnxruntime_genai as og

    config = og.Config(package_dir)
    if config_overlay:
        config.overlay(json.dumps(config_overlay))
    if intra_op_num_threads is not None:
        config.overlay(json.dumps({"model": {"decoder": {"session_options": {
            "intra_op_num_threads": intra_op_num_threads}}}}))
    model = og.Model(config)

    effective = genai_config(package_dir)
    for key, value in (config_overlay or {}).get("model", {}).items():
        effective["model"][key] = value
    pad = effective["model"]["pad_token_id"]
    eos = _as_set(effective["model"]["eos_token_id"])
    for row in prompts:
        if pad in row:
            raise ValueError(f"prompt {list(row)} contains the pad id {pad}; genai would mask it out")

    ids, _ = pad_batch(prompts, pad, "right")
    width = ids.shape[1]
    params = og.GeneratorParams(model)
    options = dict(do_sample=False, batch_size=len(prompts), max_length=width + max_new_tokens)
    if suppress_eos:
        options["min_length"] = width + max_new_tokens
    params.set_search_options(**options)
    generator = og.Generator(model, params)
    generator.append_tokens(ids.astype(np.int32))
    # Tokens are collected step by step from get_next_tokens(): get_sequence()
    # is not uniform about a final EOS (at batch size 1 genai leaves the EOS
    # that ended generation out of the sequence; in a batch it keeps it).
    rows: list[list[int]] = [[] for _ in prompts]
    finished = [False] * len(prompts)
    while not generator.is_done():
        generator.generate_next_token()
        for i, token in enumerate(int(t) for t in generator.get_next_tokens()):
            if not finished[i]:
                rows[i].append(token)
                finished[i] = token in eos
    if suppress_eos:
        for i, row in enumerate(rows):
            sequence = [int(t) for t in generator.get_sequence(i)]
            assert sequence[width:] == row, (sequence[width:], row)
    del generator, params, model
    return rows


def load_hf_model(checkpoint_dir: str):
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=torch.float32)
    model.eval()
    return model


def hf_generate(
    checkpoint_dir_or_model,
    prompts: Prompts,
    max_new_tokens: int,
    *,
    suppress_eos: bool = True,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    return_margins: bool = False,
):
    """Greedy-generates with transformers' ``generate(do_sample=False)`` on a left-padded batch.

    ``checkpoint_dir_or_model`` is a checkpoint folder or an already loaded
    model. ``eos_token_id`` / ``pad_token_id`` default to the model's
    generation config. With ``return_margins`` also returns, per row, the gap
    between the best and second-best (processed) score at every step: a
    small gap means a mismatch there may be a floating-point near-tie.
    """
    import torch

    model = checkpoint_dir_or_model
    if isinstance(model, str):
        model = load_hf_model(model)
    gen_config = model.generation_config
    eos = eos_token_id if eos_token_id is not None else gen_config.eos_token_id
    pad = pad_token_id if pad_token_id is not None else gen_config.pad_token_id
    if pad is None:
        pad = sorted(_as_set(eos))[0] if eos is not None else 0
    ids, mask = pad_batch(prompts, pad, "left")
    kwargs = dict(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens, eos_token_id=eos,
                  pad_token_id=pad, return_dict_in_generate=True, output_scores=True,
                  temperature=None, top_p=None, top_k=None)
    if suppress_eos:
        kwargs["min_new_tokens"] = max_new_tokens
    with torch.no_grad():
        out = model.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), **kwargs)
    new = out.sequences[:, ids.shape[1]:].tolist()
    eos_set = _as_set(eos)
    rows = [_cut_after_eos([int(t) for t in row], eos_set) for row in new]
    if not return_margins:
        return rows
    scores = torch.stack(out.scores, dim=1).float()  # [batch, steps, vocab]
    top2 = scores.topk(2, dim=-1).values
    gaps = (top2[..., 0] - top2[..., 1]).tolist()
    margins = [gaps[i][: len(rows[i])] for i in range(len(rows))]
    return rows, margins


def record_hf_generate(path: str, checkpoint_dir_or_model, prompts: Prompts,
                       max_new_tokens: int, **kwargs) -> None:
    """hf_generate's rows and margins on one torch thread (how the L4 tests ran it), saved as
    JSON: a reference_cases module's recording, which a test reads with load_hf_generate
    instead of importing torch."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows, margins = hf_generate(checkpoint_dir_or_model, prompts, max_new_tokens,
                                    return_margins=True, **kwargs)
    finally:
        torch.set_num_threads(threads)
    with open(path, "w") as f:
        json.dump({"rows": rows, "margins": margins}, f)


def load_hf_generate(path: str) -> tuple[list[list[int]], list[list[float]]]:
    """(rows, margins) as record_hf_generate saved them."""
    with open(path) as f:
        recorded = json.load(f)
    return recorded["rows"], recorded["margins"]
