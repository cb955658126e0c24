"""docs/models.md must be exactly what the registries generate."""

import os

from mobius.ep.capabilities import EpCapabilities
from mobius.models import catalog
from mobius.models.registry import FAMILIES

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "models.md")


def test_docs_models_md_is_up_to_date():
    with open(DOC, encoding="utf-8") as f:
        committed = f.read()
    assert committed == catalog.models_markdown(), (
        "docs/models.md is stale: run ./bazelw run //tools:models_doc"
    )


def test_every_family_and_ep_has_a_cell():
    rows = catalog.models_table()
    assert [r[0] for r in rows[1:]] == [f.name for f in FAMILIES]
    assert all(len(r) == len(rows[0]) for r in rows)


def test_task_restricted_ep_says_why():
    family = next(f for f in FAMILIES if f.task.name == "feature-extraction")
    caps = EpCapabilities(name="llm-only", tasks={"text-generation"})
    assert catalog.support(family, caps).startswith("no (llm-only runs text-generation only")


def test_every_family_is_listed_under_its_task():
    from mobius.tasks.registry import TASKS

    rows = catalog.tasks_table()
    assert [r[0] for r in rows[1:]] == list(TASKS)
    listed = {name: row[0] for row in rows[1:] for name in row[-1].split(", ") if name}
    assert listed == {f.name: f.task.name for f in FAMILIES}


def test_peer_architectures_resolve_as_their_checkpoints_would():
    """Each architecture of ORT GenAI's builder maps to the family a checkpoint stating that
    architecture and model_type builds as (or "not yet"); the checkpoint's own config.json is
    what mobius reads, so a family declaring either key counts."""
    rows = {r[0]: r[2] for r in catalog.peer_table()[1:]}
    assert len(rows) == len(catalog.PEER_ARCHITECTURES) == 38
    assert rows["LlamaForCausalLM"] == "llama"
    assert rows["PhiMoEForCausalLM"] == "phimoe"  # by model_type: the hub's own spelling
    names = {f.name for f in FAMILIES} | {"not yet"}
    assert set(rows.values()) <= names
