"""A classifier's labels (config.json ``id2label`` / ``num_labels``), checked, and carried
into the package as ONNX metadata so a runtime can name its predictions."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from mobius.errors import ConfigError

METADATA_KEY = "id2label"  #: model.onnx metadata_props key: JSON {"0": "NEG", ...}
_MAX_LABELS = 1_000_000


def id2label(raw: Mapping[str, Any]) -> dict[int, str]:
    """Label names by class index 0..n-1 (transformers' LABEL_i where only num_labels is set)."""
    labels = raw.get("id2label")
    if labels is None:
        count = raw.get("num_labels", 2)
        if not isinstance(count, int) or isinstance(count, bool) or not 0 < count <= _MAX_LABELS:
            raise ConfigError(f"num_labels {count!r} is not a positive count")
        return {i: f"LABEL_{i}" for i in range(count)}
    if not isinstance(labels, dict) or not 0 < len(labels) <= _MAX_LABELS:
        raise ConfigError(f"id2label must be a non-empty mapping, got {type(labels).__name__}")
    try:
        out = {int(k): str(v) for k, v in labels.items()}
    except (TypeError, ValueError):
        raise ConfigError(f"id2label keys must be class indices, got {sorted(labels)[:3]}") from None
    if sorted(out) != list(range(len(out))):
        raise ConfigError(f"id2label keys must be 0..{len(out) - 1}, got {sorted(out)[:5]}")
    return out


@dataclasses.dataclass(frozen=True)
class LabelOptions:
    """A classifier family's labels (its ModelFamily.options inherit these fields)."""

    id2label: dict | None = None
    num_labels: int = 2


def label_count(options: LabelOptions) -> int:
    """How many classes the labels name (checked as :func:`id2label` checks them)."""
    return len(id2label({"id2label": options.id2label, "num_labels": options.num_labels}))


def label_metadata(raw: Mapping[str, Any]) -> dict[str, str]:
    return {METADATA_KEY: json.dumps({str(i): name for i, name in id2label(raw).items()})}
