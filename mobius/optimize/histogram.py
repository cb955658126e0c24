"""Op histograms: the unit in which the pipeline reports what each rule did."""

from __future__ import annotations

import collections

import onnx_ir as ir


def op_key(node: ir.Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def op_histogram(model: ir.Model) -> collections.Counter:
    """Counts of each op in the main graph (custom domains prefixed)."""
    return collections.Counter(op_key(node) for node in model.graph)


def diff(before: collections.Counter, after: collections.Counter) -> tuple[dict, dict]:
    """(added, removed) op counts between two histograms."""
    added = {k: after[k] - before[k] for k in after if after[k] > before[k]}
    removed = {k: before[k] - after[k] for k in before if before[k] > after[k]}
    return added, removed


def describe(added: dict, removed: dict) -> str:
    parts = [f"+{n} {k}" for k, n in sorted(added.items())]
    parts += [f"-{n} {k}" for k, n in sorted(removed.items())]
    return ", ".join(parts)
