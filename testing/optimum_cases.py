"""transformers' side of //testing:optimum_test, recorded at build time (reference_cases,
//rules:references.bzl): one tiny checkpoint per Optimum class and what transformers
computes on it, so the test process never imports torch.

* decoders ("llama", "qwen3"; qwen3's head_dim is not hidden_size / heads):
  greedy ``generate`` of a batch whose row 1 is left-padded (tokens and each
  step's logits), its prefill logits, and
  the greedy tokens of PROMPT (docs/clients/optimum.md's example).
* encoder-decoders ("t5", "mt5", "bart", "marian", "whisper"): the logits of a 4-token decoder prompt over a
  source batch whose row 1 is right-padded (whisper: random log-mel features), and
  greedy ``generate`` from the source alone (tokens and each step's logits), and t5's
  greedy tokens of SEQ2SEQ_PROMPT (docs/clients/optimum.md's second example).
* encoders: the task's output (``last_hidden_state`` or ``logits``) on a padded batch
  or on random pixels.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from testing.reference_cases import case_dir

PROMPT = "The capital of France is"
SEQ2SEQ_PROMPT = "translate English to German: The house is wonderful."
NEW_TOKENS = 12
#: case -> (tiny preset, Optimum class suffix (ORTModelFor...), output it compares)
CASES_SPEC = {
    "llama": ("tiny-llama", "CausalLM", "logits"),
    "qwen3": ("tiny-qwen3", "CausalLM", "logits"),
    "bert": ("tiny-bert", "FeatureExtraction", "last_hidden_state"),
    "bert-seq-cls": ("tiny-bert-seq-cls", "SequenceClassification", "logits"),
    "roberta-tok-cls": ("tiny-roberta-tok-cls", "TokenClassification", "logits"),
    "bert-mlm": ("tiny-bert-mlm", "MaskedLM", "logits"),
    "vit-img-cls": ("tiny-vit-img-cls", "ImageClassification", "logits"),
    "t5": ("tiny-t5", "Seq2SeqLM", "logits"),
    "mt5": ("tiny-mt5", "Seq2SeqLM", "logits"),
    "bart": ("tiny-bart", "Seq2SeqLM", "logits"),
    "marian": ("tiny-marian", "Seq2SeqLM", "logits"),
    "whisper": ("tiny-whisper", "SpeechSeq2Seq", "logits"),
}
#: larger random weights where the preset's give one token over and over, so the greedy
#: tokens change from step to step
OVERRIDES = {"t5": {"initializer_factor": 4.0}, "mt5": {"initializer_factor": 4.0},
             "bart": {"init_std": 0.5}, "marian": {"init_std": 0.5},
             "whisper": {"init_std": 0.2}}
CASES = sorted(CASES_SPEC)
#: the classes that generate (their reference has "generated" and "scores")
GENERATORS = ("CausalLM", "Seq2SeqLM", "SpeechSeq2Seq")
SEQ2SEQ = ("Seq2SeqLM", "SpeechSeq2Seq")


def inputs(case: str, config: dict) -> dict[str, np.ndarray]:
    """The case's feeds: token ids (row 1 left-padded by 2 for a decoder, right-padded
    by 2 for an encoder) or pixels, seeded by the case name."""
    rng = np.random.default_rng(len(case))
    cls = CASES_SPEC[case][1]
    if cls == "ImageClassification":
        size = config["image_size"]
        return {"pixel_values": rng.standard_normal((2, 3, size, size)).astype(np.float32)}
    if cls == "SpeechSeq2Seq":
        frames = 2 * config["max_source_positions"]
        features = rng.standard_normal((2, config["num_mel_bins"], frames)).astype(np.float32)
        return {"input_features": features, "decoder_input_ids": _prompt(rng, config)}
    ids = rng.integers(3, config["vocab_size"], (2, 7)).astype(np.int64)
    mask = np.ones_like(ids)
    padded = slice(0, 2) if CASES_SPEC[case][1] == "CausalLM" else slice(5, 7)
    mask[1, padded] = 0
    ids[1, padded] = config.get("pad_token_id") or 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    if config.get("type_vocab_size"):
        feeds["token_type_ids"] = np.zeros_like(ids)
    if cls in SEQ2SEQ:
        feeds["decoder_input_ids"] = _prompt(rng, config)
    return feeds


def _prompt(rng, config: dict) -> np.ndarray:
    """A 4-token decoder prompt per row, from decoder_start_token_id."""
    prompt = rng.integers(3, config["vocab_size"], (2, 4)).astype(np.int64)
    prompt[:, 0] = config["decoder_start_token_id"]
    return prompt


def generate_feeds(feeds: dict) -> dict:
    """What generate is fed: the source alone (an encoder-decoder starts its own prompt)."""
    return {k: v for k, v in feeds.items() if k != "decoder_input_ids"}


def write_case(case: str, folder: str) -> None:
    """ckpt/ (every parameter random) and reference.npz: the feeds, transformers' output
    and, for a generator, its greedy tokens on the feeds and on its prompt."""
    import json

    import torch

    from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint, randomize_zero_tensors

    preset, cls, output = CASES_SPEC[case]
    ckpt = make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, **OVERRIDES.get(case, {}))
    if cls in SEQ2SEQ:  # buffers randomize_parameters leaves at 0 (bart's final_logits_bias)
        randomize_zero_tensors(ckpt)
    with open(os.path.join(ckpt, "config.json")) as f:
        feeds = inputs(case, json.load(f))
    if cls in ("CausalLM", "Seq2SeqLM"):
        _feed_like_the_family(ckpt)
    model = load_hf_model(ckpt)
    torch_feeds = {k: torch.from_numpy(v) for k, v in feeds.items()}
    arrays = dict(feeds)
    with torch.no_grad():
        arrays[output] = model(**torch_feeds)[output].numpy()
        if cls in GENERATORS:
            arrays.update(_generate(model, ckpt, cls, generate_feeds(torch_feeds)))
    np.savez(os.path.join(folder, "reference.npz"), **arrays)


def _generate(model, ckpt: str, cls: str, feeds: dict) -> dict[str, np.ndarray]:
    """Greedy tokens and each step's logits on ``feeds``; a text model's on its prompt."""
    import torch
    import transformers

    run = model.generate(**feeds, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                         do_sample=False, output_scores=True, return_dict_in_generate=True)
    arrays = {"generated": run.sequences.numpy(), "scores": torch.stack(run.scores).numpy()}
    if cls != "SpeechSeq2Seq":
        text = PROMPT if cls == "CausalLM" else SEQ2SEQ_PROMPT
        prompt = transformers.AutoTokenizer.from_pretrained(ckpt)([text], return_tensors="pt")
        arrays["prompt_generated"] = model.generate(**prompt, max_new_tokens=NEW_TOKENS,
                                                    do_sample=False).numpy()
    return arrays


def _feed_like_the_family(ckpt: str) -> None:
    """The tiny tokenizer returns token_type_ids, which a Llama, Qwen, T5 or BART tokenizer
    does not (and Optimum's generate refuses): its config states the family's model inputs."""
    import json

    path = os.path.join(ckpt, "tokenizer_config.json")
    if not os.path.isfile(path):
        return
    with open(path) as f:
        config = json.load(f)
    config["model_input_names"] = ["input_ids", "attention_mask"]
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def checkpoint(case: str) -> str:
    """The case's checkpoint folder (read-only)."""
    return os.path.join(case_dir(sys.modules[__name__], case), "ckpt")


def reference(case: str) -> dict[str, np.ndarray]:
    """write_case's reference.npz: the feeds and transformers' outputs."""
    with np.load(os.path.join(case_dir(sys.modules[__name__], case), "reference.npz")) as data:
        return {key: data[key] for key in data.files}
