"""Reading settings: a TOML file read safely, ``--set`` items parsed into tables, tables
merged, and ``check_value``, the one check of a setting's type. Torch-free and independent of
the config's sections (``fasttrain.config.resolve`` checks the keys a layer holds)."""

from __future__ import annotations

import math
import os
import stat
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from fasttrain.errors import ConfigError, reason

__all__ = [
    "check_value",
    "load_toml",
    "merge",
    "parse_set",
    "parse_value",
    "put",
    "tomllib",
    "user_layers",
]


def file_kind(mode: int) -> str:
    """``'a symbolic link'``, ``'a directory'``, ...: what a non-regular ``st_mode`` is."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def check_value(where: str, default, value, valid=None):
    """``value`` checked against the type of ``default`` and the ``valid`` choices (an int
    where a float goes comes back as a float); a one-line ConfigError naming ``where`` if not."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise ConfigError(f"{where} must be {type(default).__name__}, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    if valid and value not in valid:
        raise ConfigError(f"{where} must be one of {', '.join(valid)}; got {value!r}")
    return value


def parse_set(assignments) -> dict:
    """``["ppo.learning_rate=3e-4", "game.snake.height=8"]`` as a nested dict."""
    out: dict = {}
    for item in assignments:
        if not item.isprintable():  # a newline would hide the text after it from the parser
            raise ConfigError(f"--set takes one line, section.key=value; got {item!r}")
        if "=" not in item:
            raise ConfigError(f"--set takes section.key=value, got {item!r}")
        path, raw = item.split("=", 1)
        keys = path.strip().split(".")
        if len(keys) < 2 or not all(keys):
            raise ConfigError(f"--set needs section.key=value, got {item!r}")
        put(out, keys, parse_value(raw), f"--set {path}")
    return out


def parse_value(raw: str):
    """One ``--set`` value: TOML (``3e-4``, ``true``, ``"x"``, ``[1, 2]``), else the bare word
    itself (``cpu``, ``snake``)."""
    try:
        return tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        return raw.strip()


def put(tree: dict, keys, value, where: str) -> dict:
    """Set ``tree[keys[0]][keys[1]]...`` to ``value``, making tables on the way."""
    node = tree
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: {key} is a value, not a section")
    node[keys[-1]] = value
    return tree


def merge(base: dict, extra: dict) -> dict:
    """Recursive dict merge; ``extra`` wins."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


MAX_CONFIG_BYTES = 1 << 20  # a config file is text of a few KiB; this stops /dev/zero-like input


def load_toml(path: str | os.PathLike) -> dict:
    """Parse a TOML file; a missing, malformed, huge or non-regular file (a FIFO, a device)
    raises ConfigError with one line, before anything is read from it."""
    try:
        info = os.stat(path)  # a symlink to a config is fine: what it points to is checked
        if not stat.S_ISREG(info.st_mode):
            kind = file_kind(info.st_mode)
            raise ConfigError(f"config file {path} is {kind}, not a regular file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(
                f"config file {path} is {info.st_size:,} bytes; a config file is at most "
                f"{MAX_CONFIG_BYTES:,}"
            )
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} nests arrays or tables too deep") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text (UTF-8 TOML) file") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {reason(exc)}") from None


def user_layers(path: str | os.PathLike | None = None, sets=()) -> list[tuple[str, dict]]:
    """The ``--config`` file and ``--set`` items as raw ``(label, dict)`` layers, lowest first."""
    layers = [(f"--config {path}", load_toml(path))] if path is not None else []
    return [*layers, ("--set", parse_set(sets))]
