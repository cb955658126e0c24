"""The family x EP support table, derived from the two registries.

``mobius list models`` prints it and docs/models.md is generated from it
(a test fails when the committed file is stale).
"""

from __future__ import annotations

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.models.family import ModelFamily
from mobius.models.registry import FAMILIES
from mobius.weights.dtypes import SHORT_NAMES

_DTYPE_ORDER = ("f32", "f16", "bf16")


def support(family: ModelFamily, caps: EpCapabilities) -> str:
    """A cell: the dtypes this (family, EP) builds, or why it cannot."""
    if caps.tasks is not None and family.task not in caps.tasks:
        return f"no ({caps.name} runs {', '.join(sorted(caps.tasks))} only)"
    names = {SHORT_NAMES[d] for d in caps.dtypes}
    return " ".join(d for d in _DTYPE_ORDER if d in names)


def models_table() -> list[list[str]]:
    eps = list(ep_registry)
    rows = [["family", "model_type", "task", *(caps.name for caps in eps)]]
    for family in FAMILIES:
        rows.append([family.name, ", ".join(family.model_types), family.task,
                     *(support(family, caps) for caps in eps)])
    return rows


def models_markdown() -> str:
    rows = models_table()
    lines = [
        "# Supported models",
        "",
        "Generated from the model and EP registries by `./bazelw run //tools:models_doc`;",
        "a test fails when this file is stale. Each cell lists the dtypes the EP builds",
        "for the family (bf16 on EPs without bf16 kernels is stored in bf16 and computed",
        "in f32), or why the pair is rejected before building.",
        "",
        "| " + " | ".join(rows[0]) + " |",
        "|" + "---|" * len(rows[0]),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines) + "\n"
