"""Builds of one checkpoint for several EPs construct its graphs once.

Construction (the module, its weights, the task's generic graphs) reads the checkpoint,
the dtype and the task's structural flags, never the EP (components never see an EP
name), yet it is a third of a tiny build. Inside ``with shared_construction():``
``build_request`` keys it by what it reads: the first build of a key constructs, and
every build of that key (the first included) optimizes its own clone of those generic
graphs, with the warnings construction gave replayed, so each package is what a lone
build makes. The EP suites' ``ep_builds`` action builds every family for every EP so.

The pipeline's first stage reads no target either (mobius.optimize.pipeline.clean_up):
a shared construction runs it once too (``prepare``), and each build skips it. A clone's
name counters start afresh, so the names the EP's rules generate for new nodes
(``node_<Op>_<n>``) may be numbered differently from a lone build's; the graphs are
otherwise the same (mobius/shared_construction_test.py).

The generic graphs' lazy weights (read from the checkpoint, converted to the dtype) are
evaluated once per key too: each is told to keep what it computed, so the tenth EP's
package serializes the bytes the first one computed (one checkpoint's weights at a time).
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from typing import Callable, Hashable, Iterator

import onnx_ir as ir

_CACHE: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "mobius_shared_construction", default=None)


@contextlib.contextmanager
def shared_construction() -> Iterator[None]:
    """Builds inside share the construction of one checkpoint (the latest one read)."""
    token = _CACHE.set({})
    try:
        yield
    finally:
        _CACHE.reset(token)


def constructed(key: tuple[Hashable, ...] | None, construct: Callable[[], tuple],
                prepare: Callable[[dict], object] | None = None) -> tuple:
    """``construct()``'s (module, {key: generic model}) and, inside shared_construction(),
    what ``prepare(models)`` returned (None outside it: a lone build prepares nothing).
    Shared: built, and prepared, once per ``key`` (its first item names the checkpoint);
    the models are then a clone for this build. ``key`` None: never shared."""
    cache = _CACHE.get()
    if cache is None or key is None:
        return (*construct(), None)
    if key not in cache:
        if any(k[0] != key[0] for k in cache):  # one checkpoint at a time: memory stays flat
            cache.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module, models = construct()
            prepared = prepare(models) if prepare else None
        _keep_evaluated(models)
        cache[key] = (module, models, prepared, caught)
    module, models, prepared, caught = cache[key]
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return module, {name: model.clone() for name, model in models.items()}, prepared


def _keep_evaluated(models: dict) -> None:
    """Lazy initializers of ``models`` keep their tensor once computed: the clones share
    them, so every build of the key reads it once."""
    for model in models.values():
        for value in model.graph.initializers.values():
            if isinstance(value.const_value, ir.LazyTensor):
                value.const_value.cache = True
