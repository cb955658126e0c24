"""Graph inspection and the L2 expectations of the per-EP suites (testing/ep_suite.py).

Each :class:`Check` is one small, named, declarative fact about an optimized
graph, judged against the generic ("default") build of the same family and
dtype; the ep/<name>/ fusion tests list them in per-dtype tables.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Iterable

import onnx_ir as ir

GQA = "com.microsoft::GroupQueryAttention"
SKIP_SIMPLIFIED = "com.microsoft::SkipSimplifiedLayerNormalization"
SKIP_LAYER_NORM = "com.microsoft::SkipLayerNormalization"
MHA = "com.microsoft::MultiHeadAttention"
ROTARY_OPS = ("RotaryEmbedding", "com.microsoft::RotaryEmbedding")
STANDARD_DOMAINS = ("", "ai.onnx")


# --------------------------------------------------------------------------
# Graph inspection


def op_key(node: ir.Node) -> str:
    """``Op`` for the standard domain, ``domain::Op`` otherwise (as mobius' trace does)."""
    return node.op_type if node.domain in STANDARD_DOMAINS else f"{node.domain}::{node.op_type}"


def all_nodes(graph: ir.Graph) -> Iterable[ir.Node]:
    """Every node of ``graph`` including those of nested subgraphs (If/Loop/Scan bodies)."""
    return ir.traversal.RecursiveGraphIterator(graph)


def op_histogram(model: ir.Model) -> Counter:
    """Op counts of the main graph and its subgraphs (not of local function bodies)."""
    return Counter(op_key(n) for n in all_nodes(model.graph))


def count(histogram: Counter, ops: str | Iterable[str]) -> int:
    ops = (ops,) if isinstance(ops, str) else tuple(ops)
    return sum(histogram.get(op, 0) for op in ops)


def attribute(node: ir.Node, name: str, default=None):
    attr = node.attributes.get(name)
    return default if attr is None else attr.value


def is_constant(value: ir.Value | None) -> bool:
    if value is None:
        return True
    if value.const_value is not None or value.is_initializer():
        return True
    producer = value.producer()
    return producer is not None and producer.op_type == "Constant"


def residual_norm_pairs(model: ir.Model) -> dict[str, int]:
    """Residual ``Add -> (RMS|Layer)Normalization`` pairs a Skip*LayerNorm fusion would take.

    Counts norms whose data input is an Add of two computed (non-constant)
    tensors, or of a computed tensor and a stored table (positions added before
    the first norm), keyed by the fused op the pair becomes. An Add read by several
    norms (Falcon's ln_attn and ln_mlp) counts once: one Skip*LayerNorm takes
    it, and the other norms read that op's sum output.
    """
    pairs = Counter()
    seen = set()
    fused = {"RMSNormalization": SKIP_SIMPLIFIED, "SimplifiedLayerNormalization": SKIP_SIMPLIFIED,
             "LayerNormalization": SKIP_LAYER_NORM}
    for node in model.graph:
        if node.domain not in STANDARD_DOMAINS or node.op_type not in fused:
            continue
        add = node.inputs[0].producer() if node.inputs[0] is not None else None
        if add is None or add.op_type != "Add" or add.domain not in STANDARD_DOMAINS:
            continue
        constants = [v for v in add.inputs if is_constant(v)]
        # a bias vector or broadcast row stays out; a stored per-token table (a vision
        # tower's positions [tokens, hidden]) is a skip input the fused kernel takes
        if len(constants) > 1 or not all(_per_token_table(v) for v in constants) or id(
                add) in seen:
            continue
        seen.add(id(add))
        pairs[fused[node.op_type]] += 1
    return dict(pairs)


def _per_token_table(value: ir.Value | None) -> bool:
    """A constant [tokens, hidden] or [1, tokens, hidden] with more than one token."""
    shape = None if value is None else value.shape
    return shape is not None and len(shape) in (2, 3) and shape[-2] != 1 and (
        len(shape) == 2 or shape[0] == 1)


def gqa_packed(node: ir.Node) -> bool:
    """GroupQueryAttention with packed QKV: the key and value inputs are absent."""
    inputs = list(node.inputs) + [None, None, None]
    return inputs[1] is None and inputs[2] is None


def gqa_packable(node: ir.Node) -> bool:
    """An unpacked GQA whose Q, K and V are three bias-free MatMuls of one activation."""
    if gqa_packed(node):
        return False
    producers = [v.producer() if v is not None else None for v in node.inputs[:3]]
    if any(p is None or p.op_type != "MatMul" or p.domain not in STANDARD_DOMAINS
           for p in producers):
        return False
    sources = {id(p.inputs[0]) for p in producers}
    return len(sources) == 1 and all(is_constant(p.inputs[1]) for p in producers)


# --------------------------------------------------------------------------
# L2 expectations: each a small, named, declarative check.


class Check:
    """One expectation about an optimized graph; ``failure`` returns None when it holds.
    ``built`` / ``generic`` are testing.ep_suite.Built (the EP's and the generic build;
    not imported here: ep_suite imports this module)."""

    def failure(self, built, generic) -> str | None:  # pragma: no cover
        raise NotImplementedError

    def __str__(self) -> str:
        return type(self).__name__


@dataclasses.dataclass(frozen=True)
class PerLayer(Check):
    """Exactly ``n`` ops ``op`` per decoder layer."""

    op: str
    n: int = 1

    def failure(self, built, generic):
        got, want = built.histogram.get(self.op, 0), self.n * built.num_layers
        if got != want:
            return (f"expected {self.n} {self.op} per layer ({want} for "
                    f"{built.num_layers} layers), found {got}")
        return None

    def __str__(self):
        return f"{self.n}x{self.op.split('::')[-1]}/layer"


@dataclasses.dataclass(frozen=True)
class Absent(Check):
    """None of ``ops`` anywhere (main graph and subgraphs)."""

    ops: tuple[str, ...]

    def __init__(self, *ops: str):
        object.__setattr__(self, "ops", ops)

    def failure(self, built, generic):
        found = {op: built.histogram[op] for op in self.ops if built.histogram.get(op)}
        return f"expected no {', '.join(self.ops)}; found {found}" if found else None

    def __str__(self):
        return "no-" + "+".join(op.split("::")[-1] for op in self.ops)


@dataclasses.dataclass(frozen=True)
class SameCountAsGeneric(Check):
    """As many ``ops`` (any of the spellings) as the generic graph has."""

    ops: tuple[str, ...]
    label: str

    def failure(self, built, generic):
        got, want = count(built.histogram, self.ops), count(generic.histogram, self.ops)
        if got != want:
            return f"expected {want} {self.label} (as in the generic graph), found {got}"
        return None

    def __str__(self):
        return f"separate-{self.label}"


@dataclasses.dataclass(frozen=True)
class Replaced(Check):
    """Every ``op`` of the generic graph became one ``fused`` op, none left."""

    op: str
    fused: str

    def failure(self, built, generic):
        want = generic.histogram.get(self.op, 0)
        if not want:
            return f"the generic graph has no {self.op} (test premise broken)"
        got, left = built.histogram.get(self.fused, 0), built.histogram.get(self.op, 0)
        if got != want or left:
            return f"expected {want} {self.fused} (one per generic {self.op}); found {got}, {left} left"
        return None

    def __str__(self):
        return f"{self.op.split('::')[-1]}->{self.fused.split('::')[-1]}"


@dataclasses.dataclass(frozen=True)
class BiasedFused(Check):
    """Every ``op`` of the generic graph that reads a bias Add (x + constant) became one
    ``fused`` op, none left. An ``op`` with no bias ahead of it (ModernBERT's GeGLU, which
    splits the projection first) has no fused form and stays as it is.

    ``tanh_fused``: the op that biased ``op`` nodes with ``approximate="tanh"`` become
    instead (Gelu: BiasGelu for the exact form, FastGelu for the tanh form)."""

    op: str
    fused: str
    tanh_fused: str | None = None

    def failure(self, built, generic):
        nodes = biased(generic.nodes(self.op))
        tanh = sum(attribute(n, "approximate", "none") == "tanh" for n in nodes)
        want = {self.fused: len(nodes)}
        if self.tanh_fused is not None:
            want = {self.fused: len(nodes) - tanh, self.tanh_fused: tanh}
        got = {op: built.histogram.get(op, 0) for op in want}
        left = len(biased(built.nodes(self.op)))
        if got != want or left:
            return (f"expected {want} (one per generic biased {self.op}); "
                    f"found {got}, {left} biased left")
        return None

    def __str__(self):
        return f"biased-{self.op}-fused"


def biased(nodes: Iterable[ir.Node]) -> list[ir.Node]:
    """The nodes whose first input is Add(x, constant): what a Bias* fusion takes."""
    def constant(value) -> bool:
        producer = value.producer() if value is not None else None
        return value is not None and (value.const_value is not None or (
            producer is not None and producer.op_type == "Constant"))

    out = []
    for node in nodes:
        add = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
        if add is not None and add.op_type == "Add" and any(constant(v) for v in add.inputs):
            out.append(node)
    return out


@dataclasses.dataclass(frozen=True)
class GqaAttribute(Check):
    """Every GroupQueryAttention has ``name == value`` (and there is at least one where the
    model has attention layers)."""

    name: str
    value: int

    def failure(self, built, generic):
        nodes = built.nodes(GQA)
        if not nodes and built.num_layers:  # an attention-free model (Mamba2) has none to check
            return f"no GroupQueryAttention to check {self.name}={self.value} on"
        bad = [n.name for n in nodes if attribute(n, self.name, 0) != self.value]
        return f"GroupQueryAttention with {self.name} != {self.value}: {bad}" if bad else None

    def __str__(self):
        return f"gqa-{self.name}={self.value}"


def static_full_rope_nodes(model: ir.Model) -> list[ir.Node]:
    """RotaryEmbedding nodes a GQA may absorb: full head width, cos/sin gathered from tables.

    Partial rotary (``rotary_embedding_dim`` < head size), and RoPE whose
    cos/sin are computed in the graph (dynamic NTK, LongRoPE's table switch)
    cannot go into GQA's ``cos_cache``/``sin_cache`` and stay separate ops.
    """
    nodes = []
    for node in all_nodes(model.graph):
        if op_key(node) not in ROTARY_OPS:
            continue
        if attribute(node, "rotary_embedding_dim", 0) not in (0, None):
            x = node.inputs[0]
            width = x.shape[-1] if x is not None and x.shape is not None else None
            if attribute(node, "rotary_embedding_dim") != width:
                continue
        tables = [v.producer() if v is not None else None for v in node.inputs[1:3]]
        if all(t is not None and t.op_type == "Gather" and is_constant(t.inputs[0])
               for t in tables):
            nodes.append(node)
    return nodes


@dataclasses.dataclass(frozen=True)
class RopeAbsorbed(Check):
    """Every static full-width RoPE of the generic graph went into GQA (``do_rotary=1``).

    (Q and K of one layer are two RotaryEmbedding nodes and one GQA.) RoPE
    that GQA cannot take (see :func:`static_full_rope_nodes`) stays separate.
    """

    def failure(self, built, generic):
        absorbable = len(static_full_rope_nodes(generic.model))
        total = count(generic.histogram, ROTARY_OPS)
        absorbed = sum(attribute(n, "do_rotary", 0) == 1 for n in built.nodes(GQA))
        left = count(built.histogram, ROTARY_OPS)
        if absorbed != absorbable // 2 or left != total - absorbable:
            return (f"expected {absorbable // 2} GQA with do_rotary=1 and {total - absorbable} "
                    f"separate RotaryEmbedding; found {absorbed} and {left}")
        return None

    def __str__(self):
        return "rope-in-gqa"


@dataclasses.dataclass(frozen=True)
class QkvPacked(Check):
    """``packed=True``: no GQA is left whose Q/K/V are 3 MatMuls of one input (packable).
    ``packed=False``: no GQA takes packed QKV."""

    packed: bool

    def failure(self, built, generic):
        nodes = built.nodes(GQA)
        if self.packed:
            bad = [n.name for n in nodes if gqa_packable(n)]
            return f"packable but unpacked Q/K/V at {bad}" if bad else None
        bad = [n.name for n in nodes if gqa_packed(n)]
        return f"packed QKV at {bad}" if bad else None

    def __str__(self):
        return "qkv-packed" if self.packed else "qkv-unpacked"


@dataclasses.dataclass(frozen=True)
class ResidualNormsFused(Check):
    """Every residual Add -> norm pair of the generic graph became one Skip*LayerNormalization."""

    def failure(self, built, generic):
        want = residual_norm_pairs(generic.model)
        if not want:
            return "the generic graph has no residual Add -> norm pair (test premise broken)"
        left = residual_norm_pairs(built.model)
        got = {op: built.histogram.get(op, 0) for op in want}
        if left or got != want:
            return f"expected {want} (one per residual Add -> norm); found {got}, unfused {left}"
        return None

    def __str__(self):
        return "skip-norms"


@dataclasses.dataclass(frozen=True)
class NoInt64Inputs(Check):
    def failure(self, built, generic):
        bad = [v.name for v in built.model.graph.inputs if v.dtype == ir.DataType.INT64]
        return f"int64 graph inputs: {bad}" if bad else None

    def __str__(self):
        return "no-int64-inputs"


class StaticIO(Check):
    """Every graph input and output dim of the decoder is a number (NPUs compile one shape)."""

    def failure(self, built, generic):
        graph = built.model.graph
        bad = [f"{v.name}{list(v.shape) if v.shape else ''}" for v in [*graph.inputs, *graph.outputs]
               if v.shape is None or not all(isinstance(d, int) for d in v.shape)]
        return f"symbolic graph I/O dims: {bad}" if bad else None

    def __str__(self):
        return "static-io"


@dataclasses.dataclass(frozen=True)
class StandardDomainOnly(Check):
    """Zero nodes outside the standard ONNX domain, and no local functions left."""

    def failure(self, built, generic):
        custom = Counter(op_key(n) for n in all_nodes(built.model.graph)
                         if n.domain not in STANDARD_DOMAINS)
        functions = [f"{d}::{n}" for (d, n) in sorted(built.functions())]
        if custom or functions:
            return f"non-standard ops {dict(custom)}, local functions {functions}"
        return None

    def __str__(self):
        return "standard-onnx-only"


@dataclasses.dataclass(frozen=True)
class CustomOpsHaveFunctions(Check):
    """Every non-standard op carries its local function (standard-op body): portable."""

    def failure(self, built, generic):
        functions = built.functions()
        bad = Counter(op_key(n) for n in all_nodes(built.model.graph)
                      if n.domain not in STANDARD_DOMAINS
                      and (n.domain, n.op_type) not in functions)
        return f"custom ops without a function body: {dict(bad)}" if bad else None

    def __str__(self):
        return "custom-ops-have-bodies"


@dataclasses.dataclass(frozen=True)
class NoGqaWarning(Check):
    def failure(self, built, generic):
        bad = [w for w in built.warnings if "GroupQueryAttention" in w]
        return f"unexpected warnings: {bad}" if bad else None

    def __str__(self):
        return "no-gqa-warning"


def check_failures(checks: Iterable[Check], built, generic) -> list[str]:
    return [f"{check}: {msg}" for check in checks
            if (msg := check.failure(built, generic)) is not None]
