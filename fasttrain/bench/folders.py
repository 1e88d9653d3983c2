"""The run folders of ``fasttrain bench --learning``: whose run a folder holds, and whether its
files can be read.

A folder is this call's run only if what made it matches what the call would run now: the
game, the learner and every resolved setting (``--steps``, ``--set`` and the seed included), as
its ``config.toml`` and its checkpoint record them, and the game and learner of its
``summary.json``. ``--budget`` is not part of it: a larger budget trains a cut run on.

A folder of another run, or one whose files cannot be read as a run's (a checkpoint that does
not load, a ``summary.json`` that is not a run summary, a finished run's ``metrics.csv`` without
its columns or with rows that are not numbers) is renamed ``<folder>.old`` (``.old-2``...
where taken), never deleted, and the run is trained again; the suite says so in one line.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
from pathlib import Path

from fasttrain.errors import ConfigError, one_line

SUMMARY_FIELDS = {  # what the suite reads of a summary.json, and its type
    "game": str,
    "algo": str,
    "global_step": int,
    "interrupted": bool,
    "stopped_early": bool,
    "precision": str,
}
KINDS = {str: "a string", int: "a whole number", bool: "true or false"}
MISSING = object()


class BrokenRun(ConfigError):
    """A file of a run folder that cannot be read as a run's; the message names it."""


def identity(config) -> dict:
    """What makes a run the one ``config`` plans: ``"section.key" -> value`` for the game,
    the learner and every resolved setting of the run (steps and seed among them)."""
    algo, game = config.run.algo, config.game.name
    flat = {"game.name": game, "run.algo": algo}
    sections = (
        (f"game.{game}", config.params),
        (algo, config.learner),
        ("model", config.model),
        ("run", config.run),
        ("log", config.log),
    )
    for prefix, values in sections:
        for key, value in dataclasses.asdict(values).items():
            flat[f"{prefix}.{key}"] = value
    flat["curriculum"] = config.curriculum
    return flat


def difference(saved: dict, planned: dict) -> str | None:
    """The first setting where ``saved`` differs from ``planned`` (both from ``identity``), as
    ``key = saved, this call runs planned``; None where they agree."""
    for key, value in planned.items():
        theirs = saved.get(key, MISSING)
        if theirs != value:
            shown = "nothing" if theirs is MISSING else _shown(theirs)
            return f"{key} = {shown}, this call runs {_shown(value)}"
    return None


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _saved_identity(path: Path, text: str | None = None) -> dict:
    """The identity of the config in ``path`` (a config.toml), or in ``text`` (a checkpoint's)."""
    from fasttrain.config import resolve as cfg

    try:
        data = cfg.load_toml(path) if text is None else cfg.tomllib.loads(text)
        return identity(cfg.from_dict(data, str(path)))
    except (ValueError, TypeError) as exc:  # ConfigError and TOMLDecodeError are ValueErrors
        raise BrokenRun(f"{path.name} is not a run's config: {one_line(exc)}") from None


def _checkpoint_config(path: Path) -> str:
    """The config a checkpoint was written with (its TOML text); nothing in it runs."""
    from fasttrain.run import checkpoint

    try:
        state = checkpoint.read_state(path, arrays=False)
    except ConfigError as exc:
        raise BrokenRun(one_line(exc)) from None
    text = state.get("config") if isinstance(state, dict) else None
    if not isinstance(text, str):
        raise BrokenRun(f"{path.name} records no config")
    return text


def read_summary(run_dir: Path) -> dict | None:
    """``summary.json`` of ``run_dir``, its fields checked (None: there is none yet)."""
    path = run_dir / "summary.json"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise BrokenRun(f"summary.json cannot be read: {one_line(exc)}") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise BrokenRun("summary.json is not JSON (cut short, or not a run summary)") from None
    if not isinstance(data, dict):
        raise BrokenRun(f"summary.json holds a {type(data).__name__}, not a run summary")
    for key, kind in SUMMARY_FIELDS.items():
        value = data.get(key, MISSING)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            shown = "nothing" if value is MISSING else _shown(value)
            raise BrokenRun(f"summary.json has {key} = {shown}, not {KINDS[kind]}")
    return data


def foreign(run_dir: Path, config) -> str | None:
    """Why ``run_dir`` does not hold the run ``config`` plans, or holds files that cannot be
    read as a run's, in one line; None where it holds that run, or nothing yet."""
    config_toml = run_dir / "config.toml"
    saved = run_dir / "checkpoint.pt"
    files = (config_toml, saved, run_dir / "summary.json", run_dir / "metrics.csv")
    if not any(path.exists() for path in files):
        return None
    if not config_toml.exists():
        return "it has no config.toml to tell what made it"
    planned = identity(config)
    try:
        made = {config_toml.name: _saved_identity(config_toml)}
        if saved.exists():
            made[saved.name] = _saved_identity(saved, _checkpoint_config(saved))
        summary = read_summary(run_dir)
    except BrokenRun as exc:
        return str(exc)
    for name, theirs in made.items():
        changed = difference(theirs, planned)
        if changed is not None:
            return f"its {name} was made with {changed}"
    if summary is not None:
        theirs = {"game.name": summary["game"], "run.algo": summary["algo"]}
        changed = difference(theirs, {k: planned[k] for k in theirs})
        if changed is not None:
            return f"its summary.json is of {changed}"
    return None


@dataclasses.dataclass
class Rows:
    """The columns of a metrics.csv the suite reads, row by row."""

    steps: list[int]
    times: list[float]
    values: list[float]  # NaN: no episode ended in that row


def read_rows(run_dir: Path, column: str) -> Rows:
    """``metrics.csv`` of ``run_dir``: its steps, times and ``column``, every row checked."""
    path = run_dir / "metrics.csv"
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = reader.fieldnames or []
    except FileNotFoundError:
        raise BrokenRun("metrics.csv is missing") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise BrokenRun(f"metrics.csv cannot be read: {one_line(exc)}") from None
    absent = [name for name in ("global_step", "time_s", column) if name not in header]
    if absent:
        raise BrokenRun(f"metrics.csv has no column {absent[0]}")
    if not rows:
        raise BrokenRun("metrics.csv has no rows")
    out = Rows([], [], [])
    for number, row in enumerate(rows, start=1):
        if None in row or None in row.values():  # fields past the header's, or too few
            fields = sum(v is not None for k, v in row.items() if k is not None)
            fields += len(row.get(None, ()))
            raise BrokenRun(f"metrics.csv row {number} has {fields} fields, not {len(header)}")
        step, seconds = _number(row["global_step"]), _number(row["time_s"])
        if not (math.isfinite(step) and step >= 0 and step == int(step)):
            raise BrokenRun(f"metrics.csv row {number} has global_step {row['global_step']!r}")
        if not (math.isfinite(seconds) and seconds >= 0):
            raise BrokenRun(f"metrics.csv row {number} has time_s {row['time_s']!r}")
        out.steps.append(int(step))
        out.times.append(seconds)
        out.values.append(_number(row[column]))
    return out


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):  # None: a row cut short
        return math.nan


def set_aside(run_dir: Path) -> Path:
    """Rename ``run_dir`` to ``<name>.old`` (``.old-2``... where taken), holding its lock:
    nothing in it is deleted, and a live run's folder is refused in one line."""
    from fasttrain.run.rundir import RunLock

    aside, n = run_dir.with_name(f"{run_dir.name}.old"), 1
    while aside.exists() or aside.is_symlink():
        n += 1
        aside = run_dir.with_name(f"{run_dir.name}.old-{n}")
    with RunLock(run_dir):
        os.rename(run_dir, aside)
    return aside
