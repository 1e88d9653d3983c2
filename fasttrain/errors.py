"""The one error a user can cause: a bad config, argument, file or combination."""


class ConfigError(ValueError):
    """A bad config file, key, value or combination; the message is one line."""
