"""mobius: build ONNX packages for ONNX Runtime from Hugging Face checkpoints.

The public API is loaded lazily (PEP 562) so that ``import mobius`` stays
cheap and submodules can import each other without cycles.
"""

from __future__ import annotations

import importlib

_API = {
    "build": "mobius.builder",
    "build_from_module": "mobius.builder",
    "optimize_model": "mobius.optimize.pipeline",
    "OptimizationReport": "mobius.optimize.pipeline",
    "ModelPackage": "mobius.package.model_package",
    "EpCapabilities": "mobius.ep.capabilities",
    "EpRegistry": "mobius.ep.registry",
    "ep_registry": "mobius.ep.registry",
    "get_ep": "mobius.ep.registry",
    "register_ep": "mobius.ep.registry",
    "build_context": "mobius.context",
    "ep_capabilities": "mobius.context",
    "get_build_dtype": "mobius.context",
    "MobiusError": "mobius.errors",
}

__all__ = sorted(_API)


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'mobius' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
