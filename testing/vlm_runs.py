"""Greedy generation of one multimodal prompt, exactly ``new_tokens`` tokens, in
onnxruntime-genai (a saved vision-language package) and in transformers (its
checkpoint): what the VLM L4 tests compare. Each test builds its own inputs (the
families' image tensors differ); only the generation loops are shared here."""

from __future__ import annotations

import json

import numpy as np


def genai_model(path: str):
    """The package as an og.Model, its decoder on one thread (several times faster for a
    tiny model, and immune to a busy machine)."""
    import onnxruntime_genai as og

    config = og.Config(path)
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": 1}}}}))
    return og.Model(config)


def genai_greedy(model, inputs, prompt_length: int, new_tokens: int) -> list[int]:
    """genai's greedy tokens after a ``prompt_length``-token prompt: ``inputs`` is a
    processor's or hand-built og.NamedTensors (``set_inputs``), or a [1, length] id row
    for a text-only prompt (``append_tokens``, as int32: genai's token type)."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    length = prompt_length + new_tokens
    params.set_search_options(do_sample=False, max_length=length, min_length=length)
    generator = og.Generator(model, params)
    if isinstance(inputs, np.ndarray):
        generator.append_tokens(inputs.astype(np.int32))
    else:
        generator.set_inputs(inputs)
    tokens = []
    while not generator.is_done():
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens


def hf_greedy(hf_model, inputs: dict, new_tokens: int) -> list[int]:
    """transformers' greedy ``new_tokens`` tokens (exactly that many) for one prompt;
    ``inputs`` (numpy arrays or tensors, ``input_ids`` among them) go to ``generate``."""
    import torch

    kwargs = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
              for k, v in inputs.items()}
    with torch.no_grad():
        out = hf_model.generate(**kwargs, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                do_sample=False, num_beams=1, pad_token_id=0, temperature=None,
                                top_p=None, top_k=None)
    return [int(t) for t in out[0, kwargs["input_ids"].shape[1]:]]
