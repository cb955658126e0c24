"""Resolves what the user names (local folder or GGUF file, built-in tiny name, hub id) to a path."""

from __future__ import annotations

import os

from mobius.errors import MobiusError

_HUB_PATTERNS = ["*.json", "*.safetensors", "tokenizer*", "*.model", "*.txt", "*.jinja"]


def resolve_checkpoint(model: str) -> str:
    from mobius.tiny.checkpoint import make_tiny_checkpoint
    from mobius.tiny.presets import TINY_PRESETS

    expanded = os.path.expanduser(model)
    if os.path.isdir(expanded) or (os.path.isfile(expanded) and expanded.endswith(".gguf")):
        return os.path.abspath(expanded)
    if model in TINY_PRESETS:
        return make_tiny_checkpoint(model)
    if os.path.isabs(expanded) or model.startswith((".", "~")) or model.count("/") > 1:
        raise MobiusError(f"no such checkpoint folder: {model}")
    return _download(model)


def _download(repo_id: str) -> str:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - huggingface_hub is a declared dependency
        raise MobiusError("huggingface_hub is needed to download hub models") from e
    try:
        return snapshot_download(repo_id, allow_patterns=_HUB_PATTERNS)
    except Exception as e:  # network, auth, missing repo: all one-line errors
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MobiusError(
            f"could not download {repo_id!r} from the Hugging Face hub ({reason}); "
            f"without network access, pass a local checkpoint folder instead"
        ) from e
