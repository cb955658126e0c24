"""Regenerates the generated sections of docs/eps.md: the EP table (from the EP registry and
the pipeline) and the list of EP graphs onnxruntime's CPU EP cannot run (from the test
suites' testing/ep_parity.NOT_CPU_RUNNABLE, itself derived from the capabilities).

    ./bazelw run //tools:eps_doc        (or: python3 tools/eps_doc.py)
"""

import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from mobius.ep.catalog import update_document  # noqa: E402

BEGIN = "<!-- BEGIN GENERATED: not CPU-runnable (./bazelw run //tools:eps_doc) -->"
END = "<!-- END GENERATED: not CPU-runnable -->"


def not_cpu_runnable_section() -> str:
    """The table of (EP, dtype) graphs the L3 suites cannot run on the CPU EP, and why."""
    from testing.ep_parity import NOT_CPU_RUNNABLE

    lines = [BEGIN, "", "| EP | dtype | why |", "|---|---|---|"]
    said = set()
    for (ep, dtype), why in NOT_CPU_RUNNABLE.items():
        lines.append(f"| `{ep}` | {dtype} | {'same' if why in said else why} |")
        said.add(why)
    return "\n".join([*lines, "", END])


def main() -> int:
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY") or _ROOT
    path = os.path.join(root, "docs", "eps.md")
    with open(path, encoding="utf-8") as f:
        text = update_document(f.read())
    start, end = text.index(BEGIN), text.index(END) + len(END)
    text = text[:start] + not_cpu_runnable_section() + text[end:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
