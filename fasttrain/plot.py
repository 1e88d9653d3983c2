"""Learning curves from run directories: ``fasttrain plot`` and a run's own ``curves.png``.

>>> from fasttrain.plot import plot_runs
>>> plot_runs(["runs/a", "runs/b"], "curves.png", x="time", ys=("charts/score",))

One panel per y column, one line per run, x either ``steps`` (``global_step``) or ``time``
(``time_s``, seconds of training). matplotlib (the ``plot`` extra) is imported only here, with
the Agg backend, so no display is needed; the PNG is written atomically.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from fasttrain.errors import ConfigError
from fasttrain.run.rundir import write_atomic

X_AXES = {"steps": "global_step", "time": "time_s"}
DEFAULT_Y = ("charts/episodic_return",)
CURVES = ("charts/episodic_return", "charts/score")  # what a run's own curves.png shows


@dataclass
class Curves:
    """One run's metrics.csv as columns of floats (NaN where a cell is empty or not a number)."""

    label: str
    game: str
    columns: dict[str, list[float]]


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def read_run(run_dir, label: str | None = None) -> Curves:
    """The metrics of ``run_dir``; one-line ConfigError when it has none."""
    run_dir = Path(run_dir)
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no metrics.csv: is it a run directory?")
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as exc:  # random bytes, NUL bytes
        raise ConfigError(f"{path} is not a metrics.csv ({type(exc).__name__})") from None
    if not rows:
        raise ConfigError(f"{path} has no rows yet: the run has not finished an iteration")
    columns = {key: [_float(row.get(key)) for row in rows] for key in rows[0]}
    game = "?"
    config = run_dir / "config.toml"
    if config.is_file():
        from fasttrain.config.read import tomllib

        try:
            text = config.read_text(encoding="utf-8")
            game = tomllib.loads(text).get("game", {}).get("name", "?")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            pass
    return Curves(label or run_dir.resolve().name, game, columns)


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(
            "fasttrain plot needs matplotlib: pip install 'fasttrain[plot]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(runs: list[Curves], x: str = "steps", ys=DEFAULT_Y):
    """A matplotlib Figure: one panel per column of ``ys``, one line per run."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(ys), 1, figsize=(8, 3.2 * len(ys)), sharex=True, squeeze=False)
    for ax, y in zip(axes[:, 0], ys, strict=True):
        for run in runs:
            ax.plot(run.columns[X_AXES[x]], run.columns[y], label=run.label, linewidth=1.5)
        _literal(ax.set_ylabel(y))
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("environment steps" if x == "steps" else "training time (s)")
    # named outright: legend() alone leaves out a label that starts with "_" (a run "_b")
    labels = [run.label for run in runs]
    legend = axes[0, 0].legend(axes[0, 0].get_lines(), labels, loc="best", fontsize="small")
    _literal(*legend.get_texts())
    games = sorted({run.game for run in runs})
    _literal(axes[0, 0].set_title(", ".join(games)))
    fig.tight_layout()
    return fig


def _literal(*texts) -> None:
    """Draw each Text as the characters it holds: run folders, columns and game names are a
    user's, and ``$`` would start mathtext (``run $_$`` does not parse) or LaTeX."""
    for text in texts:
        text.set_parse_math(False)
        text.set_usetex(False)


def plot_runs(run_dirs, out, x: str = "steps", ys=DEFAULT_Y, labels=None) -> Path:
    """Overlay the runs in ``run_dirs`` and write the PNG ``out``; every input is checked
    (one-line ConfigError) before matplotlib is loaded."""
    if x not in X_AXES:
        raise ConfigError(f"x must be one of {', '.join(X_AXES)}, got {x!r}")
    out = Path(out)
    if not out.parent.is_dir():
        raise ConfigError(f"cannot write {out}: folder {out.parent} does not exist")
    ys = tuple(ys) or DEFAULT_Y
    labels = list(labels) if labels else [None] * len(run_dirs)
    runs = [read_run(d, label) for d, label in zip(run_dirs, labels, strict=True)]
    for run in runs:
        missing = [y for y in ys if y not in run.columns]
        if missing:
            valid = ", ".join(k for k in run.columns if k not in X_AXES.values())
            raise ConfigError(f"{run.label} has no column {missing[0]!r}; valid: {valid}")
    fig = figure(runs, x, ys)
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        _pyplot().close(fig)
    write_atomic(out, buffer.getbuffer())
    return out


def write_curves(run_dir) -> Path | None:
    """``run_dir/curves.png`` (return and score over steps) when matplotlib is installed; None
    without it (a run's end never fails for a picture)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None
    return plot_runs([run_dir], Path(run_dir) / "curves.png", "steps", CURVES)
