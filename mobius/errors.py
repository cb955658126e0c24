"""User-facing errors.

Every problem caused by the user's input (a bad checkpoint, an unknown EP, an
unwritable output folder) is raised as a subclass of :class:`MobiusError`, so
the CLI can print one clear line instead of a traceback.
"""


class MobiusError(Exception):
    """A problem with the user's input that mobius explains in one line."""


class ConfigError(MobiusError, ValueError):
    """config.json is missing, malformed, or describes something unsupported."""


class WeightsError(MobiusError):
    """A checkpoint's weight files are missing, corrupt or do not match the model."""


class UnsupportedModelError(ConfigError):
    """The checkpoint's model_type has no registered mobius family."""


class OutputError(MobiusError):
    """The output location cannot be written."""
