"""docs/eps.md's EP table must be exactly what the registry and the pipeline generate."""

import os

import onnx_ir as ir

from mobius.ep import catalog
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "eps.md")


def test_docs_eps_md_table_is_up_to_date():
    with open(DOC, encoding="utf-8") as f:
        committed = f.read()
    assert catalog.BEGIN in committed and catalog.END in committed
    assert committed == catalog.update_document(committed), (
        "docs/eps.md's EP table is stale: run ./bazelw run //tools:eps_doc")


def test_one_row_per_registered_ep():
    rows = catalog.eps_table()
    assert [r[0] for r in rows[1:]] == [f"`{name}`" for name in ep_registry.names()]
    assert all(len(r) == len(rows[0]) for r in rows)


def test_rules_follow_the_capabilities():
    stages = catalog.rules_by_stage(ep_registry.get("cuda"))
    assert "GroupQueryAttentionFusion (f16 bf16)" in stages["fuse"]
    assert not any(r.startswith("GroupQueryAttentionFusion")
                   for r in catalog.rules_by_stage(ep_registry.get("default"))["fuse"])
    bare = EpCapabilities(name="bare", dtypes={ir.DataType.FLOAT})
    assert not any("GroupQueryAttention" in r for r in catalog.rules_by_stage(bare)["fuse"])


def test_gqa_is_decoder_only():
    for caps in ep_registry:
        for role in ("encoder", "vision", "embedding"):
            fused = catalog.rules_by_stage(caps, role)["fuse"]
            assert not any(r.startswith("GroupQueryAttentionFusion") for r in fused), (caps, role)
