"""User-facing errors. The CLI prints these as one clear line (no traceback)."""


class SpatialRLError(Exception):
    """Base class of errors caused by the user's input or machine (not by a bug)."""


class DataError(SpatialRLError, ValueError):
    """A file or field of the user's data is missing or malformed; the message names it."""


class RenderUnavailable(SpatialRLError, RuntimeError):
    """The offscreen renderer (EGL) cannot start; the message names the packages to install."""


class ConfigError(SpatialRLError, ValueError):
    """A recipe, override or ``--set`` flag is invalid; the message names the file/flag and the key."""


class TrainingError(SpatialRLError, RuntimeError):
    """A training run cannot go on (e.g. its gradients stay non-finite); the message says what to change."""
