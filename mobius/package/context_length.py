"""The context length written to genai_config.json (``--context-length``).

onnxruntime-genai sizes a generator's KV cache by ``search.max_length``; with
``past_present_share_buffer`` (every GQA package) it allocates the whole
[batch, kv_heads, max_length, head_dim] buffer per layer up front, and
``model.context_length`` caps what a caller may ask for. Writing the model's
``max_position_embeddings`` there (131072 for Llama-3.1) reserves 16 GiB of
f16 KV for an 8B model on the first token, so the default is capped at
DEFAULT_CONTEXT_LENGTH; a longer context is one flag away. See
docs/clients/python-genai.md for measurements.
"""

from __future__ import annotations

from typing import Any

from mobius.errors import ConfigError

DEFAULT_CONTEXT_LENGTH = 4096


def resolve_context_length(requested: int | None, max_position_embeddings: int,
                           static: int = 0) -> int:
    """``requested`` (checked against the model), or the capped default; a static-shape
    EP's graphs hold ``static`` slots (EpCapabilities.static_context_length), no more."""
    limit = static or DEFAULT_CONTEXT_LENGTH
    if requested is None:
        return min(max_position_embeddings, limit)
    if not isinstance(requested, int) or isinstance(requested, bool) or requested < 1:
        raise ConfigError(f"context length must be a positive integer, not {requested!r}")
    if static and requested > static:
        raise ConfigError(f"context length {requested} exceeds the {static} KV slots of this "
                          f"EP's static-shape graphs")
    if requested > max_position_embeddings:
        raise ConfigError(f"context length {requested} exceeds the model's "
                          f"max_position_embeddings ({max_position_embeddings})")
    return requested


def apply_context_length(genai: dict[str, Any], context_length: int) -> None:
    """Sets genai's cap (model.context_length) and KV size (search.max_length)."""
    genai["model"]["context_length"] = context_length
    genai["search"]["max_length"] = context_length
