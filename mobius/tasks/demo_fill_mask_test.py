"""demo-fill-mask (a throwaway task): the registry discovers it from its file, and it builds
fill-mask's graph from the tiny BERT masked LM."""

from __future__ import annotations

import onnx_ir as ir

from mobius.builder import build_from_module
from mobius.context import build_context
from mobius.models.registry import family_for
from mobius.tasks.registry import TASKS, get_task
from mobius.tiny.presets import TINY_PRESETS


def test_the_registry_discovers_it():
    assert get_task("demo-fill-mask") is TASKS["demo-fill-mask"]


def test_it_builds_the_fill_mask_graph():
    raw = TINY_PRESETS["tiny-bert-mlm"]
    family = family_for(raw)
    config = family.make_config(raw)
    with build_context(None, ir.DataType.FLOAT):
        module = family.module(config)
    ops = {}
    for task in ("fill-mask", "demo-fill-mask"):
        package = build_from_module(module, config, task=task)
        ops[task] = sorted((n.domain, n.op_type) for n in package.model.graph)
    assert ops["demo-fill-mask"] == ops["fill-mask"] and ops["fill-mask"]
