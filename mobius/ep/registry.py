"""EpRegistry: the named EPs a build may target."""

from __future__ import annotations

import threading
from typing import Iterator

from mobius.ep.capabilities import EpCapabilities


class EpRegistry:
    def __init__(self) -> None:
        self._eps: dict[str, EpCapabilities] = {}
        self._lock = threading.Lock()

    def register(self, caps: EpCapabilities, overwrite: bool = False) -> EpCapabilities:
        if not isinstance(caps, EpCapabilities):
            raise TypeError("register_ep() takes an EpCapabilities instance")
        with self._lock:
            if caps.name in self._eps and not overwrite:
                raise ValueError(
                    f"EP {caps.name!r} is already registered; pass overwrite=True to replace it"
                )
            self._eps[caps.name] = caps
        return caps

    def get(self, name: str) -> EpCapabilities | None:
        return self._eps.get(name)

    def require(self, name: str) -> EpCapabilities:
        caps = self._eps.get(name)
        if caps is None:
            raise ValueError(
                f"unknown execution provider {name!r}; registered: {', '.join(self.names())}"
            )
        return caps

    def names(self) -> list[str]:
        return list(self._eps)

    def __contains__(self, name: object) -> bool:
        return name in self._eps

    def __iter__(self) -> Iterator[EpCapabilities]:
        return iter(list(self._eps.values()))

    def __len__(self) -> int:
        return len(self._eps)


def _builtin_registry() -> EpRegistry:
    from mobius.ep import (cpu, cuda, default, dml, mlx, onnx_standard, openvino, qnn,
                           trt_rtx, webgpu)

    registry = EpRegistry()
    for module in (default, cpu, cuda, dml, webgpu, mlx, trt_rtx, onnx_standard, openvino,
                   qnn):
        registry.register(module.CAPABILITIES)
    return registry


ep_registry = _builtin_registry()


def get_ep(name: str | EpCapabilities) -> EpCapabilities:
    """Looks up an EP by name (ValueError listing the registered names if unknown)."""
    if isinstance(name, EpCapabilities):
        return name
    return ep_registry.require(name)


def register_ep(caps: EpCapabilities, overwrite: bool = False) -> EpCapabilities:
    """Adds an out-of-tree EP; a duplicate name needs ``overwrite=True``."""
    return ep_registry.register(caps, overwrite=overwrite)
