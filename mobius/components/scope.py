"""Initializer-name scopes for submodules a model calls through one of its methods."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def module_scope(op, *names: str):
    """Qualifies the initializer names of modules called inside (``a.b.<param>``), for
    submodules called through a method rather than their parent's ``__call__`` (an
    encoder-decoder's encoder graph projecting the decoder layers' cross K/V)."""
    builder = op.builder
    for name in names:
        builder.push_module(name, "")
    try:
        yield
    finally:
        for _ in names:
            builder.pop_module()
