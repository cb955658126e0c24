"""The build context: which EP and dtype the current build targets.

Held in :mod:`contextvars` so that builds running in different threads or
asyncio tasks never see each other's settings. Components read only the dtype;
EP capabilities are read by the optimization pipeline, never by components.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Iterator

import onnx_ir as ir

if TYPE_CHECKING:
    from mobius.ep.capabilities import EpCapabilities

_DTYPE: contextvars.ContextVar[ir.DataType] = contextvars.ContextVar(
    "mobius_build_dtype", default=ir.DataType.FLOAT
)
_CAPS: contextvars.ContextVar["EpCapabilities | None"] = contextvars.ContextVar(
    "mobius_ep_capabilities", default=None
)


@contextlib.contextmanager
def build_context(caps: "EpCapabilities | None", dtype: ir.DataType) -> Iterator[None]:
    """Sets the target EP and dtype for the enclosed build; restores them on exit."""
    caps_token = _CAPS.set(caps)
    dtype_token = _DTYPE.set(dtype)
    try:
        yield
    finally:
        _DTYPE.reset(dtype_token)
        _CAPS.reset(caps_token)


def get_build_dtype() -> ir.DataType:
    """The float dtype of the current build (FLOAT outside any context)."""
    return _DTYPE.get()


def ep_capabilities() -> "EpCapabilities":
    """The EP of the current build (the "default" EP outside any context)."""
    caps = _CAPS.get()
    if caps is None:
        from mobius.ep.registry import get_ep

        return get_ep("default")
    return caps
