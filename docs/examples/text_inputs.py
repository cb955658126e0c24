"""Shared by the examples: a package's tokenizer and its text feeds, for onnxruntime."""

from __future__ import annotations

import json
import os

import numpy as np
from tokenizers import Tokenizer


def load_tokenizer(package: str) -> Tokenizer:
    """tokenizer.json with padding and truncation as tokenizer_config.json says."""
    tokenizer = Tokenizer.from_file(os.path.join(package, "tokenizer.json"))
    config_path = os.path.join(package, "tokenizer_config.json")
    config = {}
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    pad = config.get("pad_token") or "[PAD]"
    pad = pad["content"] if isinstance(pad, dict) else pad
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad), pad_token=pad)
    max_length = config.get("model_max_length")
    if isinstance(max_length, int) and max_length < 1_000_000:
        tokenizer.enable_truncation(max_length)
    return tokenizer


def text_feeds(session, package: str, texts: list[str]) -> dict[str, np.ndarray]:
    """The session's text inputs for a right-padded batch of ``texts``."""
    encodings = load_tokenizer(package).encode_batch(texts)
    available = {
        "input_ids": np.array([e.ids for e in encodings], np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], np.int64),
    }
    return {i.name: available[i.name] for i in session.get_inputs()}
