"""EpRegistry: the named EPs a build may target.

A built-in EP is one module of mobius.ep defining ``CAPABILITIES``; the registry discovers it
(module-name order), so adding one touches its file only. Bazel cannot import Python:
//tools:eps writes the modules' targets into rules/eps.bzl.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from types import ModuleType
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


#: modules of mobius.ep that are its machinery, not an EP
_MACHINERY = ("capabilities", "catalog", "contrib_ops", "registry")
#: test-side modules that sit beside the EPs
_TEST_SUFFIXES = ("_test", "_cases")


def ep_modules() -> tuple[ModuleType, ...]:
    """Every built-in EP's module (mobius/ep/<module>.py with CAPABILITIES), by name."""
    from mobius import ep

    names = sorted(info.name for info in pkgutil.iter_modules(ep.__path__)
                   if info.name not in _MACHINERY and not info.name.endswith(_TEST_SUFFIXES))
    modules = tuple(importlib.import_module(f"{ep.__name__}.{name}") for name in names)
    for module in modules:
        caps = getattr(module, "CAPABILITIES", None)
        if not isinstance(caps, EpCapabilities):
            raise TypeError(f"{module.__name__} defines no CAPABILITIES = EpCapabilities(...); "
                            f"mobius/ep holds EP modules and {', '.join(_MACHINERY)} only")
        if caps.name.replace("-", "_") != module.__name__.rsplit(".", 1)[-1]:
            # ep/<module>/ holds the EP's suite and goldens (testing/golden.ep_dir)
            raise ValueError(f"{module.__name__} declares EP {caps.name!r}: name the module "
                             f"{caps.name.replace('-', '_')}.py")
    return modules


def _builtin_registry() -> EpRegistry:
    registry = EpRegistry()
    for module in ep_modules():
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
