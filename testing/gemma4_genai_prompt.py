"""Gemma 4 prompts as onnxruntime-genai 0.18's Gemma 4 processors expand them: they find the
media markers by their text in the tokenizer, and replace each image marker (and the first
audio marker) with its span of soft tokens between blank lines."""

from __future__ import annotations

import json
import os

#: Gemma 4's media markers: config.json key -> the marker's text
MEDIA_TOKENS = {"boi_token_id": "<|image>", "image_token_id": "<|image|>",
                "eoi_token_id": "<image|>", "boa_token_id": "<|audio>",
                "audio_token_id": "<|audio|>", "eoa_token_index": "<audio|>"}


def add_media_tokens(folder: str) -> None:
    """Give ``folder``'s tokenizer.json MEDIA_TOKENS at its config.json's ids (special,
    added tokens), where it lacks them."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    path = os.path.join(folder, "tokenizer.json")
    with open(path) as f:
        tokenizer = json.load(f)
    known = {token["content"] for token in tokenizer["added_tokens"]}
    for key, text in MEDIA_TOKENS.items():
        if text not in known:
            tokenizer["model"]["vocab"][text] = config[key]
            tokenizer["added_tokens"].append({
                "id": config[key], "content": text, "special": True, "single_word": False,
                "lstrip": False, "rstrip": False, "normalized": False})
    with open(path, "w") as f:
        json.dump(tokenizer, f)


def expanded(prompt: str, image_tokens: int = 0, audio_tokens: int = 0) -> str:
    """``prompt`` (one <|image|> marker where image_tokens, one <|audio|> where
    audio_tokens) as genai expands it before tokenizing."""
    for count, (begin, marker, end) in (
            (image_tokens, ("boi_token_id", "image_token_id", "eoi_token_id")),
            (audio_tokens, ("boa_token_id", "audio_token_id", "eoa_token_index"))):
        if count:
            begin, marker, end = (MEDIA_TOKENS[key] for key in (begin, marker, end))
            prompt = prompt.replace(marker, f"\n\n{begin}{marker * count}{end}\n\n", 1)
    return prompt
