"""Discovers the pipeline's rules: each rule class of mobius.rewrite that declares a stage.

A rule says where it runs (``Rule.stage``, ``Rule.order``), so adding one touches its file and
its test only; the pipeline (mobius.optimize.pipeline) and the EP table (mobius.ep.catalog)
read the same list. Bazel cannot import Python: //tools:rewrite_rules writes the rule modules'
targets into rules/rewrite_rules.bzl.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from types import ModuleType

from mobius import rewrite
from mobius.rewrite.rule import Rule

#: the stages rules declare, in pipeline order (cleanup and fold are the pipeline's own)
STAGES = ("fuse", "inline", "lower")
#: test-side modules that sit beside the rules
_TEST_SUFFIXES = ("_test", "_cases")


def rewrite_modules() -> tuple[ModuleType, ...]:
    """Every module of mobius.rewrite but tests and this one, imported."""
    names = sorted(info.name for info in pkgutil.iter_modules(rewrite.__path__)
                   if not info.name.endswith(_TEST_SUFFIXES) and info.name != "registry")
    return tuple(importlib.import_module(f"{rewrite.__name__}.{name}") for name in names)


def declared_rules(module: ModuleType) -> list[type[Rule]]:
    """The rule classes ``module`` defines that declare a stage (on the class itself)."""
    return [cls for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, Rule) and cls.__module__ == module.__name__
            and cls.__dict__.get("stage")]


def collect(classes: list[type[Rule]]) -> dict[str, list[type[Rule]]]:
    """stage -> its rule classes by order; an unknown stage or a (stage, order) claimed twice
    is an error, since the pipeline's order would then depend on discovery order."""
    owner: dict[tuple[str, int], type[Rule]] = {}
    for cls in classes:
        if cls.stage not in STAGES:
            raise ValueError(f"{cls.__module__}.{cls.__name__}: stage {cls.stage!r} is not one "
                             f"of {', '.join(STAGES)}")
        other = owner.setdefault((cls.stage, cls.order), cls)
        if other is not cls:
            raise ValueError(f"{other.__module__}.{other.__name__} and "
                             f"{cls.__module__}.{cls.__name__} both declare stage "
                             f"{cls.stage!r} order {cls.order}")
    return {stage: sorted((c for c in classes if c.stage == stage), key=lambda c: c.order)
            for stage in STAGES}


@functools.cache
def staged_rules() -> dict[str, list[type[Rule]]]:
    """stage -> the rule classes the pipeline runs there, in order."""
    return collect([cls for module in rewrite_modules() for cls in declared_rules(module)])


def rule_modules() -> list[str]:
    """Names of the modules of mobius.rewrite that declare a pipeline rule."""
    return sorted({cls.__module__.rsplit(".", 1)[-1]
                   for classes in staged_rules().values() for cls in classes})
