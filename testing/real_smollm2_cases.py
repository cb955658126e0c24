"""transformers' side of the SmolLM2-135M-Instruct tests (real_smollm2_test, real_quant_test,
mobius/gguf_real_test), run at build time on the float folder //testing:smollm2 made
(reference_cases, //rules:references.bzl; $MOBIUS_SMOLLM2 names it while the cases run):
tokenizations, greedy generations and float32 logits, so no test process imports torch.

* "chat": the chat prompts' ids, transformers' greedy answers (and their text), and the
  last-position logits of one prefill per prompt and of a 256-token window of the text.
* "windows": the text's token windows whose logits real_quant_test compares.
* "gguf": gguf_real_test's chat prompt and plain prompt, their ids, the prefill logits,
  the next-token logits after transformers' greedy token, and a greedy continuation.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile

import numpy as np

from testing import real_text

#: real_smollm2_test: greedy tokens per chat prompt; one 256-token window of the text.
CHAT_PROMPTS = (
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain why the sky is blue in two sentences.",
)
CHAT_NEW_TOKENS = 24
CHAT_WINDOW = 256
#: real_quant_test: WINDOWS windows of WINDOW tokens.
WINDOWS, WINDOW = 3, 256
#: gguf_real_test: a chat prompt (ids and logits) and a plain prompt (its continuation).
GGUF_CHAT = [{"role": "user", "content": "What is the capital of France? Answer in 12 words."}]
GGUF_PLAIN = "The capital of France is"
GGUF_NEW_TOKENS = 12
#: transformers runs on one thread, as the tests' onnxruntime does (no reordered sums).
THREADS = 1

CASES = ["chat", "gguf", "windows"]


def write_case(case: str, folder: str) -> None:
    """chat.json + chat.npz, gguf.json + gguf.npz, or windows.json into ``folder``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        with torch.no_grad():
            {"chat": _chat, "gguf": _gguf, "windows": _windows}[case](folder)
    finally:
        torch.set_num_threads(threads)


def read(case: str) -> tuple[dict, dict[str, np.ndarray]]:
    """A case's <case>.json and, when written, <case>.npz arrays."""
    from testing.reference_cases import case_dir

    folder = case_dir(sys.modules[__name__], case)
    with open(os.path.join(folder, case + ".json")) as f:
        facts = json.load(f)
    arrays = os.path.join(folder, case + ".npz")
    if not os.path.exists(arrays):
        return facts, {}
    with np.load(arrays) as data:
        return facts, {key: data[key] for key in data.files}


def _chat(folder: str) -> None:
    from testing import genai_harness

    tokenizer, model = _tokenizer(), _model()
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": p}],
                                             add_generation_prompt=True,
                                             tokenize=True)["input_ids"] for p in CHAT_PROMPTS]
    tokens = genai_harness.hf_generate(model, prompts, CHAT_NEW_TOKENS, suppress_eos=False)
    # One prefill per chat prompt, and one of a 256-token window of English text.
    prefills = [[p] for p in prompts] + [real_text.token_windows(tokenizer.encode, 1,
                                                                 CHAT_WINDOW)]
    logits = {f"logits_{i}": _prefill_logits(model, rows)[:, -1]
              for i, rows in enumerate(prefills)}
    _write(folder, "chat", {"prompts": prompts, "tokens": tokens, "prefills": prefills,
                            "texts": [tokenizer.decode(row) for row in tokens]}, logits)


def _gguf(folder: str) -> None:
    import torch

    tokenizer, model = _tokenizer(), _model()
    prompt = tokenizer.apply_chat_template(GGUF_CHAT, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt)["input_ids"]
    plain = tokenizer(GGUF_PLAIN)["input_ids"]
    prefill = _prefill_logits(model, [ids])
    token = int(prefill[0, -1].argmax())
    decode = _prefill_logits(model, [ids + [token]])[:, -1:]
    generated = model.generate(torch.tensor([plain]), do_sample=False,
                               max_new_tokens=GGUF_NEW_TOKENS, min_new_tokens=GGUF_NEW_TOKENS)
    _write(folder, "gguf", {"prompt": prompt, "ids": ids, "plain": plain, "token": token,
                            "generated": generated[0, len(plain):].tolist()},
           {"prefill": prefill, "decode": decode})


def _windows(folder: str) -> None:
    _write(folder, "windows", {"windows": real_text.token_windows(_tokenizer().encode, WINDOWS,
                                                                  WINDOW)})


def _prefill_logits(model, rows) -> np.ndarray:
    """transformers' float32 logits of one prefill of ``rows``, every position."""
    import torch

    return model(torch.tensor(rows, dtype=torch.long)).logits.float().numpy()


def _write(folder: str, name: str, facts: dict, arrays: dict | None = None) -> None:
    with open(os.path.join(folder, name + ".json"), "w") as f:
        json.dump(facts, f)
    if arrays:
        np.savez(os.path.join(folder, name + ".npz"), **arrays)


@functools.cache
def _folder() -> str:
    """The float folder: $MOBIUS_SMOLLM2 (the build's), else converted once (plain pytest)."""
    from testing.real_weights import SMOLLM2_ENV, smollm2_for_tests

    prebuilt = SMOLLM2_ENV in os.environ  # then the scratch folder is not used
    return smollm2_for_tests("" if prebuilt else tempfile.mkdtemp(prefix="smollm2-"))


@functools.cache
def _tokenizer():
    import transformers

    return transformers.AutoTokenizer.from_pretrained(_folder())


@functools.cache
def _model():
    from testing import genai_harness

    return genai_harness.load_hf_model(_folder())
