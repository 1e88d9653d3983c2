"""The one error a user can cause: a bad config, argument, file or combination."""

import os


class ConfigError(ValueError):
    """A bad config file, key, value or combination; the message is one line."""


class RunError(ConfigError):
    """A run that stopped, or could not start, for a reason it states in one line (a full disk,
    a run directory in use, updates that kept going non-finite)."""


def one_line(exc: BaseException) -> str:
    """What ``exc`` says, in one line: its first line; an OSError as its reason and file
    (``permission denied: runs/x``); an empty MemoryError as ``out of memory``."""
    if isinstance(exc, OSError) and exc.errno:
        return f"{reason(exc)}: {exc.filename}" if exc.filename else reason(exc)
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines:
        return lines[0]
    return "out of memory" if isinstance(exc, MemoryError) else type(exc).__name__


def reason(exc: OSError) -> str:
    """``'no space left on device'`` for an OSError: its errno's text, lower case."""
    text = os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]
