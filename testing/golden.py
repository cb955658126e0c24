"""L5 golden op-histogram snapshots: ep/<ep>/golden/<family>.json (float builds)
and ep/<ep>/golden_int4/<family>.json (``--quant int4`` builds).

A snapshot is the op histogram (main graph and subgraphs; custom domains
prefixed, e.g. ``com.microsoft::GroupQueryAttention``) of the optimized graph
of one family's tiny checkpoint, built for one EP at the EP's primary dtype
(testing/ep_suite.EP_DTYPES). Any change -- a fusion that stops firing, a new
op sneaking in -- fails ``//ep/<name>:golden`` with a per-op diff. Intended
changes are recorded with::

    ./bazelw run //tools:golden -- --update            # every EP and family
    ./bazelw run //tools:golden -- --update --ep cpu   # one EP
    ./bazelw run //tools:golden -- --update --quant int4   # the int4 snapshots
"""

from __future__ import annotations

import json
import os

from testing import ep_suite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REGENERATE = "./bazelw run //tools:golden -- --update --ep {ep}"


def ep_dir(ep: str) -> str:
    """ep/<name> folder of an EP ("trt-rtx" -> ep/trt_rtx)."""
    return ep.replace("-", "_")


def golden_dir(ep: str, root: str = ROOT, quant: str | None = None) -> str:
    """ep/<name>/golden, or ep/<name>/golden_<quant> for quantized builds (--quant int4)."""
    return os.path.join(root, "ep", ep_dir(ep), f"golden_{quant}" if quant else "golden")


def golden_path(ep: str, family: str, root: str = ROOT, quant: str | None = None) -> str:
    return os.path.join(golden_dir(ep, root, quant), f"{family}.json")


def snapshot(built: ep_suite.Built) -> dict:
    snap = {
        "family": built.family,
        "ep": built.ep,
        "dtype": built.dtype,
        "num_layers": getattr(built.config, "num_hidden_layers", None),
        "ops": ops(built),
    }
    if built.quant:
        snap["quant"] = built.quant
    return snap


def ops(built: ep_suite.Built) -> dict[str, int]:
    """The op histogram; for multi-model packages keyed "<model>/<op>" (e.g. "vision/Conv")."""
    if list(built.models) == ["model"]:
        return dict(sorted(built.histogram.items()))
    out = {}
    for key, model in built.models.items():
        out.update({f"{key}/{op}": n for op, n in ep_suite.op_histogram(model).items()})
    return dict(sorted(out.items()))


def dumps(snap: dict) -> str:
    return json.dumps(snap, indent=2, sort_keys=False) + "\n"


def load(path: str) -> dict | None:
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def write(snap: dict, root: str = ROOT) -> str:
    path = golden_path(snap["ep"], snap["family"], root, snap.get("quant"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(dumps(snap))
    return path


def diff(expected: dict | None, actual: dict) -> list[str]:
    """Human-readable differences; empty when the snapshot matches."""
    if expected is None:
        return ["no golden file yet"]
    lines = []
    for key in ("family", "ep", "dtype", "num_layers", "quant"):
        if expected.get(key) != actual.get(key):
            lines.append(f"{key}: {expected.get(key)!r} -> {actual.get(key)!r}")
    old, new = expected.get("ops", {}), actual["ops"]
    width = max((len(op) for op in {*old, *new}), default=0)
    for op in sorted({*old, *new}):
        a, b = old.get(op), new.get(op)
        if a == b:
            continue
        before = "(absent)" if a is None else str(a)
        after = "(gone)" if b is None else str(b)
        delta = f"{(b or 0) - (a or 0):+d}"
        lines.append(f"{op.ljust(width)}  {before:>8} -> {after:<8} ({delta})")
    return lines


def failure_message(ep: str, family: str, lines: list[str], root: str = ROOT,
                    quant: str | None = None) -> str:
    rel = os.path.relpath(golden_path(ep, family, root, quant), root)
    body = "\n".join("  " + line for line in lines)
    return (f"op histogram of {family} for EP {ep!r} differs from {rel}:\n{body}\n"
            f"If the change is intended, regenerate the snapshots:\n  {REGENERATE.format(ep=ep)}"
            + (f" --quant {quant}" if quant else ""))


def stale_files(ep: str, families: list[str], root: str = ROOT,
                quant: str | None = None) -> list[str]:
    """Golden files of families that no longer exist."""
    folder = golden_dir(ep, root, quant)
    if not os.path.isdir(folder):
        return []
    known = {f"{fam}.json" for fam in families}
    return sorted(name for name in os.listdir(folder)
                  if name.endswith(".json") and name not in known)
