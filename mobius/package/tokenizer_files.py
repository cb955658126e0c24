"""Which checkpoint files make up the tokenizer (copied into the package)."""

import os

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)


def find_tokenizer_files(folder: str) -> list[str]:
    return [os.path.join(folder, f) for f in TOKENIZER_FILES if os.path.isfile(os.path.join(folder, f))]
