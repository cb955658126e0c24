"""Which checkpoint files make up the tokenizer (copied into the package).

Each file must stay inside the checkpoint (see mobius/checkpoint_files.py): a
tokenizer.json that links to /etc/passwd is refused, not copied.
"""

import logging
import os

from mobius.checkpoint_files import contained_file
from mobius.errors import MobiusError
from mobius.json_input import read_json_file

logger = logging.getLogger(__name__)

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)


def find_tokenizer_files(folder: str) -> list[str]:
    """The tokenizer files present in ``folder``; a JSON one that does not parse gets a warning."""
    found = []
    for name in TOKENIZER_FILES:
        path = contained_file(folder, name, "the tokenizer file list")
        if not os.path.isfile(path):
            continue
        if name.endswith(".json"):
            try:
                read_json_file(path, name)
            except MobiusError as e:
                logger.warning("warning: %s; it is copied as is, but tokenizers will reject it", e)
        found.append(path)
    return found
