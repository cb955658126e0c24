"""transformers' side of genai_e2e_test (the reference_cases rule runs it at build time,
//rules:references.bzl): per preset, the checkpoint, transformers' tokenizer on its
tokenizer files (what the package copies) and transformers' greedy runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

CASES = ["tiny-llama", "tiny-qwen3"]
NEW_TOKENS = 20
# With transformers' default initializer_range (0.02) the tied-embedding
# Qwen3 checkpoint degenerates to repeating the last prompt token forever (the
# residual stream is ~ the input embedding, whose best match under the tied
# LM head is itself), and the Llama one ends in a loop after a few steps with
# a top-1/top-2 logit gap of ~5e-5 at one step. 0.2 gives varied
# continuations with gaps >= ~3e-3, far above ORT-vs-torch float32 noise.
CHECKPOINT_OVERRIDES = {"initializer_range": 0.2}
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time there was",
]
TOKENIZER_TEXTS = TEXTS + [
    "Hello, wörld! 你好 🙂  two  spaces\n newline\ttab",
    " leading space, 0123456789 + 42 = 4242;",
    "mobius builds ONNX packages </s> with <s> specials <pad>",
]


def file_hashes(folder: str, names) -> dict[str, str]:
    """sha256 of each of ``names`` present in ``folder``."""
    hashes = {}
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                hashes[name] = hashlib.sha256(f.read()).hexdigest()
    return hashes


def write_case(preset: str, folder: str) -> None:
    """ckpt/; tokenizer.json (transformers' tokenizer on the checkpoint's tokenizer files
    alone, as a package holds them); runs/<name>.json (genai_harness.record_hf_generate):
    row0 / row1 alone, both as a batch, and with an EOS that greedy decoding reaches
    (eos.json: the step k, the id) suppressed and honoured."""
    from testing.genai_harness import hf_generate, load_hf_model, record_hf_generate
    from testing.hf_checkpoints import make_hf_checkpoint

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, **CHECKPOINT_OVERRIDES)
    prompts = _write_tokenizer(checkpoint, os.path.join(folder, "tokenizer.json"))
    model = load_hf_model(checkpoint)
    runs = os.path.join(folder, "runs")
    os.makedirs(runs)
    for row, prompt in enumerate(prompts):
        record_hf_generate(os.path.join(runs, f"row{row}.json"), model, [prompt], NEW_TOKENS)
    record_hf_generate(os.path.join(runs, "batch.json"), model, prompts, NEW_TOKENS)
    free = hf_generate(model, prompts[:1], NEW_TOKENS)[0]
    k = next(k for k in range(2, NEW_TOKENS) if free[k] not in free[:k])
    with open(os.path.join(runs, "eos.json"), "w") as f:
        json.dump({"free": free, "k": k}, f)
    record_hf_generate(os.path.join(runs, "eos_suppressed.json"), model, prompts, NEW_TOKENS,
                       eos_token_id=free[k])
    record_hf_generate(os.path.join(runs, "eos_stopped.json"), model, prompts, NEW_TOKENS,
                       eos_token_id=free[k], suppress_eos=False)


def _write_tokenizer(checkpoint: str, path: str) -> list[list[int]]:
    """transformers.AutoTokenizer on the checkpoint's tokenizer files (no config.json, as in
    a package): TOKENIZER_TEXTS' ids and decodes, the special ids, the files' hashes.
    Returns TEXTS' ids (the prompts)."""
    import transformers

    from mobius.package.tokenizer_files import TOKENIZER_FILES

    scratch = tempfile.mkdtemp(prefix="tokenizer-")
    try:
        for name in file_hashes(checkpoint, TOKENIZER_FILES):
            shutil.copyfile(os.path.join(checkpoint, name), os.path.join(scratch, name))
        tokenizer = transformers.AutoTokenizer.from_pretrained(scratch)
    finally:
        shutil.rmtree(scratch)
    ids = [tokenizer.encode(text) for text in TOKENIZER_TEXTS]
    with open(path, "w") as f:
        json.dump({"ids": ids, "decoded": [tokenizer.decode(row, skip_special_tokens=True)
                                           for row in ids],
                   "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                   "pad_token_id": tokenizer.pad_token_id,
                   "files": file_hashes(checkpoint, TOKENIZER_FILES)}, f)
    return ids[:len(TEXTS)]
