"""The optimization trace: ``[EP Trace]`` log lines and the closing summary table."""

from __future__ import annotations

import dataclasses
import logging

logger = logging.getLogger("mobius.optimize")
PREFIX = "[EP Trace]"


#: Sites and rejections printed per rule before "+N more" (a 32-layer model has 64 norms).
MAX_LISTED = 8


@dataclasses.dataclass
class RuleRecord:
    stage: str
    rule: str
    matched: int
    added: dict  # op -> count the rule added; filled when tracing (empty otherwise)
    removed: dict
    sites: tuple[str, ...] = ()  # nodes it rewrote at
    rejections: tuple[tuple[str, str], ...] = ()  # (node, reason) matched but not rewritten


class Tracer:
    """Collects what happened; logs it at INFO when enabled."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.records: list[RuleRecord] = []

    def line(self, text: str) -> None:
        if self.enabled:
            logger.info("%s %s", PREFIX, text)

    def details(self, record: RuleRecord) -> None:
        """Where the rule rewrote, then each candidate it turned down with the reason."""
        if record.sites:
            listed = ", ".join(record.sites[:MAX_LISTED])
            more = len(record.sites) - MAX_LISTED
            self.line(f"    at {listed}" + (f" (+{more} more)" if more > 0 else ""))
        for node, reason in record.rejections[:MAX_LISTED]:
            self.line(f"    rejected {node}: {reason}")
        if len(record.rejections) > MAX_LISTED:
            self.line(f"    (+{len(record.rejections) - MAX_LISTED} more rejected)")

    def summary(self) -> str:
        rows = [("Rule", "Matched", "+Nodes", "-Nodes")]
        for r in self.records:
            rows.append((f"{r.stage}/{r.rule}", str(r.matched), str(sum(r.added.values())),
                         str(sum(r.removed.values()))))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        return "\n".join(lines)
