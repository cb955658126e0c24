"""transformers' side of run_test / verify_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case the checkpoint (ckpt/) and what transformers makes
of PROMPT on it (expected.json): a decoder's greedy tokens with the prompt fed as is and
through the chat template added to the checkpoint; a classifier's pipeline labels; an
embedder's last_hidden_state; fill-mask's pipeline candidates."""

from __future__ import annotations

import json
import os

CASES = ["llama", "bert-seq-cls", "bert", "bert-mlm"]
PRESETS = {"llama": "tiny-llama", "bert-seq-cls": "tiny-bert-seq-cls", "bert": "tiny-bert",
           "bert-mlm": "tiny-bert-mlm"}
#: the fill-mask prompt (the tiny tokenizer gets this mask token added)
MASKED = "Once upon a [MASK] there was"
PROMPT = "Once upon a time there was"
NEW_TOKENS = 8
#: a template unlike the raw prompt, in the jinja subset every runtime reads
CHAT_TEMPLATE = ("{% for message in messages %}<|{{ message['role'] }}|>\n"
                 "{{ message['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def write_case(case: str, folder: str) -> None:
    from testing.hf_checkpoints import make_hf_checkpoint

    # initializer_range 0.2: varied greedy continuations with wide top-1 gaps
    # (package/genai_e2e_cases.py)
    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESETS[case],
                                    initializer_range=0.2)
    expected = {"llama": _decoder, "bert-seq-cls": _classifier, "bert": _embedder,
                "bert-mlm": _fill_mask}[case](checkpoint)
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def _decoder(checkpoint: str) -> dict:
    import torch
    import transformers

    path = os.path.join(checkpoint, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    with open(path, "w") as f:
        json.dump({**config, "chat_template": CHAT_TEMPLATE}, f, indent=1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    chat = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                         add_generation_prompt=True, tokenize=False)
    out = {}
    for name, text in (("raw", PROMPT), ("chat", chat)):
        ids = tokenizer(text)["input_ids"]
        with torch.no_grad():
            tokens = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                    dtype=torch.long), max_new_tokens=NEW_TOKENS, do_sample=False)
        out[name] = {"prompt_ids": ids, "new_ids": tokens[0, len(ids):].tolist()}
    return out


def _classifier(checkpoint: str) -> dict:
    import transformers

    classify = transformers.pipeline("text-classification", model=checkpoint, top_k=None)
    return {"labels": classify(PROMPT)}


def _embedder(checkpoint: str) -> dict:
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModel.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        hidden = model(**tokenizer(PROMPT, return_tensors="pt")).last_hidden_state
    return {"last_hidden_state": {"shape": list(hidden.shape),
                                  "values": hidden.double().flatten().tolist()}}


def _fill_mask(checkpoint: str) -> dict:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    tokenizer.add_special_tokens({"mask_token": "[MASK]"})  # id < vocab_size: a real row
    tokenizer.save_pretrained(checkpoint)
    fill = transformers.pipeline("fill-mask", model=checkpoint, top_k=5)
    return {"candidates": [{"id": c["token"], "score": c["score"]} for c in fill(MASKED)]}
