"""optimize_model: adapts a generic graph to one EP, in place, in fixed stages.

Ordering is architectural: cleanup -> fuse -> inline -> lower -> fold. Fusions
run only where the EP has the fused kernel (never fuse what the EP would
decompose); inlining expands the function bodies of custom ops the EP lacks;
lowering enforces hard graph constraints (no If, no Shape, int32 I/O ...).
"""

from __future__ import annotations

import dataclasses
import warnings

import onnx_ir as ir

from mobius.components.attention_mask import NON_CAUSAL
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.optimize.histogram import describe, diff, op_histogram
from mobius.optimize.trace import RuleRecord, Tracer
from mobius.quantize.spec import QuantSpec
from mobius.rewrite import library_passes as lib
from mobius.rewrite.group_query_attention import caches_non_causal_attention, is_sink_attention
from mobius.rewrite.graph_inputs import attention_mask_input
from mobius.rewrite.registry import staged_rules
from mobius.rewrite.rule import Rule, RuleContext
from mobius.roles import ROLES
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype


def _cleanup() -> list[Rule]:
    """The target-independent first stage: what every EP's pipeline starts with."""
    return [lib.IdentityElimination(), lib.CommonSubexpressionElimination(),
            lib.DeduplicateInitializers(), lib.ConstantFolding(), lib.RemoveUnused()]


def _stages() -> list[tuple[str, list[Rule]]]:
    """cleanup, then each rule stage's discovered rules in their declared order, then fold."""
    staged = [(stage, [cls() for cls in classes]) for stage, classes in staged_rules().items()]
    return [("cleanup", _cleanup()), *staged,
            ("fold", [lib.RemoveUnused(), lib.ConstantFolding()])]


def clean_up(model: ir.Model) -> list[RuleRecord]:
    """The cleanup stage alone, in place; its records, for ``optimize_model(cleaned=...)``.

    It reads no target (its rules see no RuleContext), so builds of one generic graph for
    several EPs run it once (mobius/shared_construction.py) instead of once per EP.
    """
    records = []
    for rule in _cleanup():
        matched = rule.apply(model, None)
        records.append(RuleRecord("cleanup", rule.name, matched, {}, {}, rule.sites,
                                  rule.rejections))
    return records


@dataclasses.dataclass
class OptimizationReport:
    ep: str
    dtype: ir.DataType
    role: str
    records: list[RuleRecord]
    histogram: dict

    def matched(self, rule: str) -> int:
        return sum(r.matched for r in self.records if r.rule == rule)


def optimize_model(
    model: ir.Model,
    ep: str | EpCapabilities = "default",
    dtype: str | ir.DataType = ir.DataType.FLOAT,
    model_role: str = "decoder",
    trace: bool = False,
    quant: QuantSpec | None = None,
    cleaned: list[RuleRecord] | None = None,
) -> OptimizationReport:
    """Optimizes ``model`` in place for ``ep``; returns what each rule did.

    ``quant`` (see mobius.quantize.spec.resolve_quant) quantizes every Linear. ``cleaned``:
    the records of a :func:`clean_up` already run on ``model``, whose stage is then skipped.
    """
    caps = get_ep(ep)
    dtype = parse_dtype(dtype)
    if model_role not in ROLES:
        raise ValueError(f"unknown model role {model_role!r}; expected one of {', '.join(ROLES)}")
    ctx = RuleContext(caps, dtype, model_role, quant)
    tracer = Tracer(trace)
    tracer.line(f"target={caps.name} dtype={SHORT_NAMES.get(dtype, dtype.name)} role={model_role}")
    # what each rule added and removed, where a trace asks (a histogram per rule costs)
    histogram = op_histogram(model) if trace else {}
    if cleaned is not None:
        tracer.records.extend(cleaned)
    for stage, rules in _stages():
        if stage == "cleanup" and cleaned is not None:
            continue
        stage_before = model.graph.num_nodes()
        for rule in rules:
            if not rule.applies(ctx):
                continue
            before = histogram
            matched = rule.apply(model, ctx)
            histogram = op_histogram(model) if trace else {}
            added, removed = diff(before, histogram)
            record = RuleRecord(stage, rule.name, matched, added, removed,
                                rule.sites, rule.rejections)
            tracer.records.append(record)
            change = describe(added, removed)
            tracer.line(f"  {stage}/{rule.name}: {change if matched or change else 'no matches'}")
            tracer.details(record)
        tracer.line(f"stage {stage}: {stage_before} -> {model.graph.num_nodes()} nodes")
    if trace:
        for row in tracer.summary().splitlines():
            tracer.line(row)
    histogram = dict(op_histogram(model))
    _warn_if_gqa_missing(caps, dtype, model_role, histogram, model)
    return OptimizationReport(caps.name, dtype, model_role, tracer.records, histogram)


def _warn_if_gqa_missing(caps, dtype, role, histogram, model=None) -> None:
    # GQA takes its sequence lengths from the attention_mask input: a decoder
    # without one (Whisper's) is not expected to fuse.
    expected = (role == "decoder" and caps.fuses_gqa(dtype)
                and (model is None or attention_mask_input(model.graph) is not None))
    attention = histogram.get("Attention", 0)
    if model is not None and not caps.gqa_head_sink:  # attention with sinks stays standard
        attention -= sum(is_sink_attention(n) for n in model.graph)
    if model is not None:  # so does attention under a non-causal mask (Gemma 3's images)
        attention -= sum(_non_causal(n) for n in model.graph)
        if caches_non_causal_attention(model.graph):  # and then every layer (Gemma 4's)
            attention = 0
    if expected and attention and not histogram.get("com.microsoft::GroupQueryAttention", 0):
        warnings.warn(
            f"GroupQueryAttention was expected for EP {caps.name!r} / "
            f"{SHORT_NAMES.get(dtype, dtype.name)} but none was produced; "
            f"{attention} Attention node(s) remain",
            UserWarning,
            stacklevel=3,
        )


def _non_causal(node) -> bool:
    mask = node.inputs[3] if node.op_type == "Attention" and len(node.inputs) > 3 else None
    return mask is not None and NON_CAUSAL in mask.metadata_props
