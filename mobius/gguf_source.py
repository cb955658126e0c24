"""A GGUF file as a build source: its config, its checkpoint and its tokenizer.

``mobius build --model x.gguf`` (or a folder holding one GGUF file and no
config.json) reads everything a Hugging Face folder would give from the one
file: config.json from its metadata (config/gguf_config.py), the tensors
under their HF names (weights/gguf_checkpoint.py), tokenizer.json and
tokenizer_config.json (package/gguf_tokenizer.py).
"""

from __future__ import annotations

import os
import struct
from typing import Any

from mobius.checkpoint_files import contained_file
from mobius.errors import MobiusError, WeightsError

SUFFIX = ".gguf"


def gguf_file(path: str) -> str | None:
    """``path`` if it is a GGUF file, the one GGUF file of a folder without config.json,
    else None (a Hugging Face folder)."""
    if os.path.isfile(path):
        return path if path.endswith(SUFFIX) else None
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, "config.json")):
        return None
    found = sorted(f for f in os.listdir(path) if f.endswith(SUFFIX))
    if len(found) > 1:
        raise MobiusError(f"{path} holds {len(found)} GGUF files ({', '.join(found[:4])}); "
                          f"name the one to build")
    return contained_file(path, found[0], "the checkpoint folder") if found else None


class GgufSource:
    """One opened GGUF file: ``raw`` / ``generation`` stand for config.json and
    generation_config.json."""

    def __init__(self, path: str):
        import gguf

        from mobius.config.gguf_config import gguf_config

        self.path = os.path.abspath(path)
        try:
            self.reader = gguf.GGUFReader(self.path)
        except (ValueError, OSError, KeyError, IndexError, OverflowError, struct.error) as e:
            raise WeightsError(f"{os.path.basename(path)} is not a readable GGUF file "
                               f"({e})") from e
        self.arch, self.raw, self.generation = gguf_config(self.reader)

    def checkpoint(self, quant_spec):
        """The tensors under HF names; Q4_0 / Q8_0 Linears keep their integers where
        ``quant_spec`` (None: a float build) quantizes them to their bits."""
        from mobius.weights.gguf_checkpoint import GgufCheckpoint

        bits_for = None if quant_spec is None else quant_spec.bits_for
        return GgufCheckpoint(self.path, self.reader, self.arch, self.raw, bits_for)

    def tokenizer_files(self, context_length: int) -> dict[str, Any]:
        from mobius.package.gguf_tokenizer import gguf_tokenizer_files

        return gguf_tokenizer_files(self.reader, context_length)


def open_gguf(path: str) -> GgufSource | None:
    """The GGUF source ``path`` names, or None for a Hugging Face folder."""
    file = gguf_file(path)
    return None if file is None else GgufSource(file)
