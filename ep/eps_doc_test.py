"""docs/eps.md's list of EP graphs the CPU EP cannot run is testing/ep_parity.py's list."""

import os
import re

from testing import ep_parity

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "eps.md")


def _not_cpu_runnable_rows() -> set[tuple[str, str]]:
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Running EP graphs on onnxruntime's CPU EP", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([\w-]+)` \| (\w+) \|", section, flags=re.MULTILINE))


def test_docs_list_exactly_the_graphs_the_cpu_ep_cannot_run():
    assert _not_cpu_runnable_rows() == set(ep_parity.NOT_CPU_RUNNABLE)
