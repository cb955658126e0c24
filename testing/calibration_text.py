"""Calibration text for --quant-calibration that is not the quality benchmark's text.

The quality benchmark scores packages on testing/text/ (18th/19th-century
speeches); calibrating on the same text would fit the weights to the very
tokens they are scored on. This is the repository's own prose instead:
docs/*.md and README.md with fenced code blocks, tables, headings' markup
and HTML dropped, so what is left is English sentences about software.
Calibration reads the first 4,096 tokens (README.md, then the start of
docs/adding_a_model.md), so the text, and the calibrated packages, change
when README.md does.
"""

from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_DROPPED_LINE = re.compile(r"^\s*(\||<|!\[|\[[^\]]*\]:)")


def markdown_files(root: str = ROOT) -> list[str]:
    """README.md and docs/*.md (sorted), the calibration text's sources."""
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def prose(markdown: str) -> str:
    """``markdown`` without code blocks, tables, HTML, images or link definitions."""
    text = _FENCE.sub("", markdown)
    lines = [line.lstrip("#>-* ").rstrip() for line in text.splitlines()
             if not _DROPPED_LINE.match(line)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def write_calibration_text(path: str, root: str = ROOT) -> str:
    """Writes the prose of :func:`markdown_files` to ``path``; returns ``path``."""
    parts = []
    for name in markdown_files(root):
        with open(name, encoding="utf-8") as f:
            parts.append(prose(f.read()))
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(parts) + "\n")
    return path
