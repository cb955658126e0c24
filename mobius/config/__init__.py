"""Model configuration: what a checkpoint's config.json says, normalized."""

from mobius.config.architecture import ArchitectureConfig, GenerationDefaults, load_config
from mobius.config.rope import RopeConfig

__all__ = ["ArchitectureConfig", "GenerationDefaults", "RopeConfig", "load_config"]
