"""The registry finds each rule where its class says it runs, and refuses ambiguous orders."""

from __future__ import annotations

import types

import pytest

from mobius.optimize.pipeline import _stages
from mobius.rewrite.registry import STAGES, collect, declared_rules, rule_modules, staged_rules
from mobius.rewrite.rule import Rule


def _rule(name: str, stage: str, order: int, module: str = "mobius.rewrite.fake") -> type[Rule]:
    return type(name, (Rule,), {"__module__": module, "name": name, "stage": stage,
                                "order": order, "apply": lambda self, model, ctx: 0})


def test_the_pipeline_runs_the_discovered_rules_in_declared_order():
    stages = dict(_stages())
    assert list(stages) == ["cleanup", *STAGES, "fold"]
    for stage in STAGES:
        classes = staged_rules()[stage]
        assert [r.name for r in stages[stage]] == [c.name for c in classes]
        assert [c.order for c in classes] == sorted(c.order for c in classes)
    assert "group_query_attention" in rule_modules()
    assert "fusion_util" not in rule_modules()  # a helper, not a rule


def test_order_sorts_within_a_stage():
    late, early = _rule("Late", "fuse", 20), _rule("Early", "fuse", 10)
    assert collect([late, early]) == {"fuse": [early, late], "inline": [], "lower": []}


def test_a_duplicate_order_names_both_rules():
    with pytest.raises(ValueError, match=r"fake\.First and mobius\.rewrite\.fake\.Second both "
                                         r"declare stage 'lower' order 30"):
        collect([_rule("First", "lower", 30), _rule("Second", "lower", 30)])


def test_an_unknown_stage_is_an_error():
    with pytest.raises(ValueError, match="stage 'fold' is not one of fuse, inline, lower"):
        collect([_rule("Folder", "fold", 10)])


def test_only_classes_declaring_a_stage_in_their_module_are_rules():
    module = types.ModuleType("mobius.rewrite.fake")
    own = _rule("Own", "fuse", 10)
    module.Own = own
    module.Imported = _rule("Imported", "fuse", 20, module="mobius.rewrite.other")
    module.Derived = type("Derived", (own,), {"__module__": module.__name__})  # inherits stage
    module.Base = type("Base", (Rule,), {"__module__": module.__name__})
    assert declared_rules(module) == [own]
