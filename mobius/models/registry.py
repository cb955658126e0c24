"""The model registry: HF model_type (or architecture name) -> ModelFamily.

Families are discovered, not listed: every module of mobius.models that declares
``FAMILIES`` (a tuple, in lookup order) or ``FAMILY`` is a family module, read in
module-name order. Adding a family is one file under mobius/models (docs/adding_a_model.md).
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from mobius import models
from mobius.errors import UnsupportedModelError
from mobius.models.family import COHORTS, ModelFamily

#: modules of mobius.models that are not families (the registry and its readers)
_NOT_FAMILY_MODULES = frozenset({"catalog", "family", "registry"})
#: test-side modules that sit beside the families: tests and their transformers cases
#: (//rules:references.bzl)
_TEST_SUFFIXES = ("_test", "_cases")


def _family_modules() -> tuple[ModuleType, ...]:
    names = sorted(info.name for info in pkgutil.iter_modules(models.__path__)
                   if not info.name.endswith(_TEST_SUFFIXES) and info.name not in _NOT_FAMILY_MODULES)
    found = (importlib.import_module(f"{models.__name__}.{name}") for name in names)
    return tuple(m for m in found if hasattr(m, "FAMILIES") or hasattr(m, "FAMILY"))


def declared_families(module: ModuleType) -> tuple[ModelFamily, ...]:
    """The families a family module declares: its FAMILIES, else its FAMILY."""
    return tuple(getattr(module, "FAMILIES", None) or (module.FAMILY,))


def _collect(modules: tuple[ModuleType, ...]) -> tuple[ModelFamily, ...]:
    """Every declared family once; a key (model_type, architecture) claimed twice is an
    error, since lookup would depend on discovery order."""
    families, owner = [], {}
    for module in modules:
        for family in declared_families(module):
            for key in (family.name, *family.model_types, *family.architectures):
                if owner.setdefault(key, (family, module.__name__))[0] is not family:
                    raise ValueError(
                        f"{key!r} is declared by {owner[key][1]} and {module.__name__}")
            if family not in families:
                families.append(family)
    return tuple(families)


FAMILY_MODULES: tuple[ModuleType, ...] = _family_modules()
FAMILIES: tuple[ModelFamily, ...] = _collect(FAMILY_MODULES)

_BY_KEY = {key: family for family in FAMILIES for key in (*family.model_types, *family.architectures)}


def cohort(name: str) -> tuple[ModelFamily, ...]:
    """The families that joined the shared suite ``name`` (mobius.models.family.COHORTS)."""
    if name not in COHORTS:
        raise ValueError(f"unknown cohort {name!r}; known: {sorted(COHORTS)}")
    return tuple(f for f in FAMILIES if name in f.cohorts)


def supported_model_types() -> list[str]:
    return sorted(t for family in FAMILIES for t in family.model_types)


def family_for(raw_config: dict) -> ModelFamily:
    """Finds the family of a config.json dict: by architecture name first (a head such
    as BertForSequenceClassification is its own family), then by model_type."""
    keys = [*(raw_config.get("architectures") or []), raw_config.get("model_type")]
    for key in keys:
        if key in _BY_KEY:
            return _BY_KEY[key]
    raise UnsupportedModelError(
        f"model_type {raw_config.get('model_type')!r} is not supported; "
        f"supported: {', '.join(supported_model_types())}"
    )
