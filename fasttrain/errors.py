"""The one error a user can cause: a bad config, argument, file or combination."""


class ConfigError(ValueError):
    """A bad config file, key, value or combination; the message is one line."""


class RunError(ConfigError):
    """A run that stopped, or could not start, for a reason it states in one line (a full disk,
    a run directory in use, updates that kept going non-finite)."""
