"""A tiny CTC checkpoint's processor files: a character vocabulary for transformers'
Wav2Vec2CTCTokenizer (vocab.json + tokenizer_config.json) and the raw-waveform
feature extractor's preprocessor_config.json, as the hub's wav2vec2 checkpoints
ship them."""

from __future__ import annotations

import json
import os
import string
from typing import Any, Mapping

from mobius.errors import MobiusError
from mobius.tasks.audio_processor import default_preprocessor_config

#: ids 0..3 (0 is also the CTC blank: config.json's pad_token_id), then the word delimiter
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]
WORD_DELIMITER = "|"
_CHARACTERS = WORD_DELIMITER + string.ascii_uppercase + "'" + string.digits + string.ascii_lowercase


def ctc_vocab(vocab_size: int) -> dict[str, int]:
    """token -> id for ``vocab_size`` tokens: the special tokens, "|", A-Z, ', digits, a-z."""
    tokens = SPECIAL_TOKENS + list(_CHARACTERS)
    if not len(SPECIAL_TOKENS) < vocab_size <= len(tokens):
        raise MobiusError(f"a tiny CTC vocabulary holds {len(SPECIAL_TOKENS) + 1}.."
                          f"{len(tokens)} tokens, not {vocab_size}")
    return {token: i for i, token in enumerate(tokens[:vocab_size])}


def write_tiny_ctc_processor(folder: str, raw: Mapping[str, Any]) -> None:
    """vocab.json, tokenizer_config.json and preprocessor_config.json for ``raw``.

    The feature extractor returns an attention mask for layer-norm feature encoders
    only, as the hub's checkpoints do (a group-norm encoder normalizes over the whole
    padded waveform, so transformers feeds it no mask)."""
    files = {
        "vocab.json": ctc_vocab(raw["vocab_size"]),
        "tokenizer_config.json": {
            "tokenizer_class": "Wav2Vec2CTCTokenizer", "bos_token": "<s>", "eos_token": "</s>",
            "pad_token": "<pad>", "unk_token": "<unk>", "word_delimiter_token": WORD_DELIMITER,
            "do_lower_case": False, "processor_class": "Wav2Vec2Processor"},
        "preprocessor_config.json": default_preprocessor_config(
            raw.get("feat_extract_norm", "group") == "layer"),
    }
    for name, content in files.items():
        with open(os.path.join(folder, name), "w") as f:
            json.dump(content, f, indent=2)
