"""The repository's English evaluation text (testing/text) cut the way the real-weights
tests read it: whole sentences for embedding checks, token windows for next-token ones.

Deterministic (no sampling): the same sentences and windows on every run, so a change
in a figure is a change in the package, not in the input.
"""

from __future__ import annotations

import os
import re

TEXT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "text")
FILES = ("declaration.txt", "lincoln.txt")


def text(name: str) -> str:
    """The contents of testing/text/``name``."""
    with open(os.path.join(TEXT_DIR, name), encoding="utf-8") as f:
        return f.read()


def sentences(count: int, min_words: int = 6, max_words: int = 40) -> list[str]:
    """``count`` sentences, taken in turn from each file (so both voices appear), of
    ``min_words``..``max_words`` words: long enough to mean something, short enough
    that no tokenizer truncates them."""
    per_file = []
    for name in FILES:
        parts = re.split(r"(?<=[.;!?])\s+", " ".join(text(name).split()))
        per_file.append([p for p in parts if min_words <= len(p.split()) <= max_words])
    picked = [s for group in zip(*per_file) for s in group][:count]
    if len(picked) < count:
        raise ValueError(f"the text has only {len(picked)} sentences of {min_words}-"
                         f"{max_words} words, {count} asked for")
    return picked


def token_windows(encode, count: int, length: int) -> list[list[int]]:
    """``count`` disjoint windows of ``length`` token ids, spread evenly from the start to
    the end of the whole text (both files) as ``encode`` (a tokenizer's text -> ids)
    tokenizes it: a few windows then sample every part of it, not only its opening."""
    ids = list(encode("\n\n".join(text(name) for name in FILES)))
    if len(ids) < count * length:
        raise ValueError(f"the text is {len(ids)} tokens, {count} x {length} asked for")
    step = (len(ids) - length) // max(count - 1, 1)
    return [ids[i * step:i * step + length] for i in range(count)]
