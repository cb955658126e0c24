"""The rule interface shared by every rewrite in the pipeline.

A rule declares *when it is legal* (``applies``: a question about the EP's
capabilities, the dtype and the model role) separately from *what it matches*
(``match``: the pattern, anchored at one node), *whether this instance may be
rewritten* (``check``: True, or a ``Rejected`` saying why not, which ``--trace``
prints) and *the replacement* (``rewrite``). Whole-graph transforms that are not
anchored at a node override ``apply`` instead.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from mobius.ep.capabilities import EpCapabilities
from mobius.quantize.spec import QuantSpec


@dataclasses.dataclass(frozen=True)
class RuleContext:
    caps: EpCapabilities
    dtype: ir.DataType
    role: str  #: one of mobius.roles.ROLES
    quant: QuantSpec | None = None  # weight quantization asked for (None: float weights)


@dataclasses.dataclass(frozen=True)
class Rejected:
    """A structural match that ``check`` turned down, and why (falsy, like False)."""

    reason: str

    def __bool__(self) -> bool:
        return False


class Rule(abc.ABC):
    """A graph transformation; ``apply`` returns how many places it rewrote.

    After ``apply``, ``sites`` names the nodes it rewrote at and ``rejections``
    the (node, reason) pairs it matched but did not rewrite (NodeRule fills both;
    whole-graph rules leave them empty).
    """

    name: str = ""
    #: the pipeline stage a rule class runs in ("fuse", "inline" or "lower"; "" for
    #: library passes and bases), and its place there, lower first: mobius.rewrite.registry
    #: discovers the rules from these, so a new rule is its file and its test
    stage: str = ""
    order: int = 0
    sites: tuple[str, ...] = ()
    rejections: tuple[tuple[str, str], ...] = ()

    def applies(self, ctx: RuleContext) -> bool:
        """Legality: whether this rule should run at all for the target."""
        return True

    @abc.abstractmethod
    def apply(self, model: ir.Model, ctx: RuleContext) -> int: ...


class NodeRule(Rule):
    """A rule anchored at single nodes of the main graph: match -> check -> rewrite."""

    @abc.abstractmethod
    def match(self, node: ir.Node) -> Any | None:
        """Returns a match object if ``node`` anchors the pattern, else None."""

    def check(self, match: Any, ctx: RuleContext) -> bool | Rejected:
        """Extra conditions on a structural match (shapes, attributes, dtypes): True,
        or Rejected(reason)."""
        return True

    @abc.abstractmethod
    def rewrite(self, model: ir.Model, match: Any, ctx: RuleContext) -> None: ...

    def apply(self, model: ir.Model, ctx: RuleContext) -> int:
        sites, rejections = [], []
        for node in list(model.graph):
            if node.graph is None:  # removed by an earlier rewrite in this pass
                continue
            match = self.match(node)
            if match is None:
                continue
            verdict = self.check(match, ctx)
            where = node.name or node.op_type
            if verdict:
                self.rewrite(model, match, ctx)
                sites.append(where)
            else:
                rejections.append((where, verdict.reason if isinstance(verdict, Rejected)
                                   else "check() gave no reason"))
        self.sites, self.rejections = tuple(sites), tuple(rejections)
        if sites:
            RemoveUnusedNodesPass()(model)  # drop what the rewrites left dead
        return len(sites)


def producer(value: ir.Value | None, op_type: str, domain: str = "") -> ir.Node | None:
    """The node producing ``value`` if it is ``domain::op_type``, else None."""
    if value is None:
        return None
    node = value.producer()
    if node is None or node.op_type != op_type or node.domain != domain:
        return None
    return node


def sole_consumer(value: ir.Value) -> ir.Node | None:
    """The only node that reads ``value`` (None if several, none, or a graph output)."""
    uses = value.uses()
    if len(uses) != 1 or value.is_graph_output():
        return None
    return uses[0].node


def attr(node: ir.Node, name: str, default: Any = None) -> Any:
    attribute = node.attributes.get(name)
    return default if attribute is None else attribute.value


def initializer_array(value: ir.Value | None):
    """The numpy value of a constant input (initializer or Constant), else None."""
    if value is None:
        return None
    if value.const_value is not None:
        return value.const_value.numpy()
    node = value.producer()
    if node is not None and node.op_type == "Constant" and node.domain == "":
        tensor = attr(node, "value")
        if tensor is not None:
            return tensor.numpy()
        for key in ("value_int", "value_float"):
            if key in node.attributes:
                import numpy as np

                return np.array(attr(node, key))
        ints = attr(node, "value_ints")
        if ints is not None:
            import numpy as np

            return np.array(list(ints), dtype=np.int64)
    return None
