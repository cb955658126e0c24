"""transformers' side of transformers_js_test, run at build time (reference_cases,
//rules:references.bzl), so the test process imports neither torch nor transformers.

* one case per text-generation family: ckpt/ (its tiny preset with INIT_RANGE weights)
  and reference.json: the prompt's ids, transformers' greedy ``generate`` tokens (prompt
  included) and the text its ``pipeline("text-generation")`` returns;
* "bert": ckpt/ (the seed-0 checkpoint) and expected.npy, ``pipeline("feature-extraction")``
  of the prompt;
* "gemma3-swa": a Gemma 3 text decoder whose layers all attend through a window of
  SWA_WINDOW tokens, and reference.json of SWA_PROMPT (longer than two windows).
"""

from __future__ import annotations

import json
import os

PROMPT = "The quick brown fox jumps over"
NEW_TOKENS = 10
#: Weights this large make greedy decoding of a random model leave the prompt's
#: last token (tied-embedding Qwen3 and Gemma repeat it at the default 0.02).
INIT_RANGE = 0.5
GENERATION_FAMILIES = ("llama", "qwen3", "gemma", "phi3")
SWA_WINDOW = 4
#: 9 tokens: the window slides in prefill
SWA_PROMPT = "The quick brown fox jumps over the lazy dog"
SWA = "gemma3-swa"
#: the sliding-window case's tiny-gemma3 overrides (an untied head: with tied
#: embeddings this checkpoint repeats the prompt's last token)
SWA_OVERRIDES = {"sliding_window": SWA_WINDOW, "tie_word_embeddings": False,
                 "layer_types": ["sliding_attention", "sliding_attention"]}

CASES = [*GENERATION_FAMILIES, "bert", SWA]


def write_case(case: str, folder: str) -> None:
    """ckpt/ and the case's transformers outputs (see above) into ``folder``."""
    from testing.hf_checkpoints import make_hf_checkpoint

    checkpoint = os.path.join(folder, "ckpt")
    if case == "bert":
        make_hf_checkpoint(checkpoint, _preset(case))
        _feature_extraction(checkpoint, os.path.join(folder, "expected.npy"))
        return
    if case == SWA:
        make_hf_checkpoint(checkpoint, "tiny-gemma3", initializer_range=INIT_RANGE,
                           **SWA_OVERRIDES)
    else:
        make_hf_checkpoint(checkpoint, _preset(case), initializer_range=INIT_RANGE)
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(_generation(checkpoint, SWA_PROMPT if case == SWA else PROMPT), f)


def _preset(family: str) -> str:
    from mobius.models.registry import FAMILIES

    return next(f.tiny_preset for f in FAMILIES if f.name == family)


def _generation(checkpoint: str, prompt: str) -> dict:
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    inputs = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    generator = transformers.pipeline("text-generation", model=model, tokenizer=tokenizer)
    text = generator(prompt, max_new_tokens=NEW_TOKENS, do_sample=False,
                     return_full_text=False)[0]["generated_text"]
    return {"prompt_ids": inputs["input_ids"][0].tolist(), "tokens": ids[0].tolist(),
            "text": text}


def _feature_extraction(checkpoint: str, path: str) -> None:
    import numpy as np
    import torch
    import transformers

    extractor = transformers.pipeline("feature-extraction", model=checkpoint,
                                      dtype=torch.float32)
    np.save(path, np.asarray(extractor(PROMPT), np.float32))
