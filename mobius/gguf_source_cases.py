"""transformers' side of gguf_source_test (the reference_cases rule runs it at build time,
//rules:references.bzl): tiny GGUF files (testing/gguf_files.py) and what transformers
makes of each: its run (GGUF loading; the checkpoint for Gemma 1), its dequantized
weights, its GGUF tokenizer's encodings.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

#: tiny checkpoints: every dimension a multiple of 32 (one Q4_0 / Q8_0 block) where
#: blocks run, 256 for the k-quant case; qwen2 has q/k/v biases, llama q/k permuted,
#: phi3 fused qkv_proj / gate_up_proj, qwen3 q/k norms, gemma norms stored plus one
#: and sliding windows shorter than the prompt
PRESETS = {"llama": ("tiny-llama", dict(intermediate_size=96)),
           "qwen2": ("tiny-qwen2", dict(intermediate_size=96)),
           "phi3": ("tiny-phi3", dict(intermediate_size=96)),
           # transformers' GGUF loader reads no head_dim for qwen3 (it keeps 128)
           "qwen3": ("tiny-qwen3", dict(intermediate_size=96, head_dim=128)),
           "llama-256": ("tiny-llama", dict(hidden_size=256, intermediate_size=256,
                                            num_hidden_layers=1)),
           # transformers' GGUF loader keeps query_pre_attn_scalar 256: llama.cpp scales
           # by head_dim, so head_dim 256; gemma3: 6 layers, the 6th global (llama.cpp's)
           "gemma2": ("tiny-gemma2", dict(intermediate_size=96, head_dim=256,
                                          query_pre_attn_scalar=256)),
           "gemma3": ("tiny-gemma3", dict(intermediate_size=96, head_dim=256,
                                          query_pre_attn_scalar=256, sliding_window=4,
                                          num_hidden_layers=6, layer_types=None)),
           "gemma": ("tiny-gemma", dict(intermediate_size=96))}
#: transformers reads no GGUF of these: the reference is the checkpoint it was written from
NO_TRANSFORMERS_GGUF = ("gemma",)
K_QUANTS = {"blk.0.ffn_down.weight": "Q6_K", "blk.0.ffn_up.weight": "Q4_K",
            "blk.0.ffn_gate.weight": "Q5_K", "blk.0.attn_q.weight": "Q5_0",
            "blk.0.attn_k.weight": "Q5_1", "blk.0.attn_v.weight": "Q4_1"}
UNKNOWN_TYPE = {"blk.0.ffn_down.weight": "IQ2_XS"}
#: the files: (preset, qtype, GGUF tensor name -> another type), and what is recorded of
#: each besides the file: "run" (transformers' run), "weights" (its dequantized state
#: dict), "tokens" (its GGUF tokenizer on TEXTS)
FILES = [
    ("llama", "F32", None, ("run", "tokens")), ("llama", "F16", None, ("run",)),
    ("llama", "BF16", None, ("run",)), ("llama", "Q4_0", None, ("run", "weights")),
    ("llama", "Q8_0", None, ("run", "weights")), ("qwen2", "F32", None, ("run",)),
    ("qwen2", "Q8_0", None, ("run",)), ("qwen2", "Q4_0", None, ("run", "weights")),
    ("phi3", "F32", None, ("run",)), ("phi3", "Q4_0", None, ("run", "weights")),
    ("qwen3", "F32", None, ("run",)), ("gemma2", "Q4_0", None, ("run", "weights")),
    ("gemma3", "Q8_0", None, ("run", "weights")), ("gemma", "F32", None, ("run",)),
    ("llama-256", "F32", K_QUANTS, ("run",)), ("llama-256", "F32", UNKNOWN_TYPE, ()),
]
#: the SentencePiece-vocabulary file (testing/gguf_files.spm_tokenizer) of "llama"
SENTENCEPIECE = "llama-sentencepiece"
TEXTS = ("The quick brown fox jumps", " leading  spaces\n tab\tend é ü 中文 🙂",
         "ONNX</s> Runtime <s>runs models; 0123456789!")
#: the parity run: unpadded, prefill + 2 decode steps
PAD, STEPS = 0, 2


def case_name(preset: str, qtype: str, types: dict | None = None) -> str:
    """The case of a GGUF file: preset, qtype and the other tensor types."""
    return "-".join([preset, qtype, *sorted(set((types or {}).values()))])


_RECORDS = {case_name(p, q, t): (p, q, t, records) for p, q, t, records in FILES}
CASES = [*_RECORDS, SENTENCEPIECE]


def write_case(case: str, folder: str) -> None:
    """gguf/model.gguf (alone in its folder), checkpoint_tokenizer.json (the tokenizer it
    was written from), and the records: run.npz (testing/decoder_reference.py),
    weights.npz, tokens.json ({"ids", "decoded"} per text)."""
    from testing.gguf_files import spm_tokenizer, write_gguf
    from testing.hf_checkpoints import make_hf_checkpoint

    preset, qtype, types, records = _RECORDS.get(case, ("llama", "F32", None, ("tokens",)))
    scratch = tempfile.mkdtemp(prefix="gguf-")
    try:
        name, overrides = PRESETS[preset]
        hf = make_hf_checkpoint(os.path.join(scratch, "hf"), name, **overrides)
        shutil.copyfile(os.path.join(hf, "tokenizer.json"),
                        os.path.join(folder, "checkpoint_tokenizer.json"))
        spm = spm_tokenizer(os.path.join(scratch, "spm.json")) if case == SENTENCEPIECE else None
        os.makedirs(os.path.join(folder, "gguf"))
        path = write_gguf(hf, os.path.join(folder, "gguf", "model.gguf"), qtype, types,
                          sentencepiece=spm)
        _record(path, hf if preset in NO_TRANSFORMERS_GGUF else None, records, folder)
    finally:
        shutil.rmtree(scratch)


def _record(path: str, checkpoint: str | None, records: tuple[str, ...], folder: str) -> None:
    """transformers on ``path`` (or on ``checkpoint``, which it was written from)."""
    import numpy as np
    import torch
    import transformers

    from testing import decoder_reference
    from testing.hf_checkpoints import load_hf_model

    gguf_folder, name = os.path.split(path)
    if "tokens" in records:
        tokenizer = transformers.AutoTokenizer.from_pretrained(gguf_folder, gguf_file=name)
        ids = [tokenizer(text)["input_ids"] for text in TEXTS]
        with open(os.path.join(folder, "tokens.json"), "w") as f:
            json.dump({"ids": ids, "decoded": [tokenizer.decode(row, skip_special_tokens=True)
                                               for row in ids]}, f)
    if "run" not in records:
        return
    model = load_hf_model(checkpoint) if checkpoint else (
        transformers.AutoModelForCausalLM.from_pretrained(
            gguf_folder, gguf_file=name, dtype=torch.float32).eval())
    run = decoder_reference.record(model, model.config.vocab_size, pad=PAD, steps=STEPS)
    decoder_reference.save(run, os.path.join(folder, "run.npz"))
    if "weights" in records:
        np.savez(os.path.join(folder, "weights.npz"),
                 **{k: v.numpy() for k, v in model.state_dict().items()})
