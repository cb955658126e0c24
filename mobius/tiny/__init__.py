"""Built-in tiny random checkpoints: a whole build with no download."""

from mobius.tiny.checkpoint import TINY_PRESETS, make_tiny_checkpoint

__all__ = ["TINY_PRESETS", "make_tiny_checkpoint"]
