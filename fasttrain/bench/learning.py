"""``fasttrain bench --learning``: how good and how fast the agents of the default presets are.

Each chosen game is trained with its defaults (presets included, ``--set`` on top) once per seed.
Where the game's learner trains populations (PPO and PQN, ``population_run.population_problem``)
its seeds are one population, one process (``fasttrain run --seeds``):
``<game>-<algo>-population/seed-S/`` under ``--out``; otherwise (DQN, one seed, or
``--solo``) each seed is its own run, one after another: ``<game>-<algo>-seedS/``. A
population's seconds are the whole population's, every member training at once. The suite then
reads every run's ``metrics.csv`` and writes, beside them:

- ``learning.md``: one row per game, with the seeds, the median and worst final score, the
  reference it is measured against, the median training seconds to 50% and 90% of the
  reference, the median SPS, the update's precision, how the seeds trained (one population or
  one by one) and the seconds all of them took;
- ``learning.png``: every game's curve against wall-clock seconds of training, the median
  over seeds as a line and the min-max as a band (extra ``plot``);
- ``learning.json``: every figure of every run.

The final score of a run is the mean of its metrics rows in the last ``FINAL_SHARE`` of its
steps (one row holds only the episodes of one iteration, which swing from row to row). A run that
finished before (its ``summary.json`` says it ran to its end, or this call's ``--budget`` stopped
it) is read, not run again, and one cut short resumes from its checkpoint, so a suite of hours
can be stopped and continued; only the run this call would make counts (same game, learner,
settings, steps and seed: ``fasttrain.bench.folders``), any other folder is set aside and its
run trained again.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import click

from fasttrain.bench.folders import BrokenRun, foreign, read_rows, read_summary, set_aside
from fasttrain.errors import ConfigError

FINAL_SHARE = 0.05  # the share of a run's last steps whose rows make its final score
FRACTIONS = (0.5, 0.9)  # of the reference: the times to them go in the table
GRID = 100  # points of the wall-clock axis the median and band are drawn on


@dataclass(frozen=True)
class Reference:
    """What a game's runs are measured against."""

    metric: str  # "score" or "return": the metrics.csv column charts/<metric>
    value: float
    source: str


REFERENCES = {
    "snake": Reference("score", 50.0, "fasttrain's goal (every seed >= 50)"),
    "cartpole": Reference("return", 475.0, "solved (Gymnasium)"),
    "arena": Reference("score", 10.0, "food per life (greedy bots ~3)"),
    "minatar-breakout": Reference("return", 50.0, "pgx PPO, 20M steps"),
    "minatar-asterix": Reference("return", 25.0, "pgx PPO, 20M steps"),
    "minatar-freeway": Reference("return", 63.0, "pgx PPO, 20M steps"),
    "minatar-space_invaders": Reference("return", 145.0, "pgx PPO, 20M steps"),
    "minatar-seaquest": Reference("return", 54.0, "pgx PPO, 20M steps"),
}
COLUMNS = {"score": "charts/score", "return": "charts/episodic_return"}
DEFAULT_GAMES = ("snake", *(g for g in REFERENCES if g.startswith("minatar-")))


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``; one line for anything else."""
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds takes distinct seeds >= 0 such as 0,1,2, got {text!r}")
    return seeds


@dataclass
class RunResult:
    """One seed's run, read from its metrics.csv."""

    game: str
    seed: int
    run_dir: str
    algo: str  # the learner that trained it
    steps: int
    seconds: float  # training seconds (time_s of the last row)
    sps: float
    final: float
    best: float
    to_reference: dict  # "50%" -> training seconds to that share of the reference (None: never)
    precision: str
    curve: list  # (time_s, value) of every row with episodes
    members: int = 1  # runs trained side by side in its process: a population's size


def final_value(steps: list[int], values: list[float]) -> float:
    """The mean of the values whose step is in the last ``FINAL_SHARE`` of the run (NaN: none
    of those rows had an episode)."""
    if not steps:
        return math.nan
    start = steps[-1] * (1.0 - FINAL_SHARE)
    tail = [v for s, v in zip(steps, values, strict=True) if s >= start and math.isfinite(v)]
    return statistics.fmean(tail) if tail else math.nan


def read_result(run_dir: Path, game: str, seed: int, reference: Reference) -> RunResult:
    """A run's figures from its metrics.csv and summary.json; a file that cannot be read as a
    run's raises ``BrokenRun`` naming it."""
    rows = read_rows(run_dir, COLUMNS[reference.metric])
    summary = read_summary(run_dir)
    if summary is None:
        raise BrokenRun("summary.json is missing")
    steps, times, values = rows.steps, rows.times, rows.values
    to_reference = {}
    for fraction in FRACTIONS:
        goal = fraction * reference.value
        hit = next((t for t, v in zip(times, values, strict=True) if v >= goal), None)
        to_reference[f"{fraction:.0%}"] = hit
    return RunResult(
        game=game,
        seed=seed,
        run_dir=str(run_dir),
        algo=summary["algo"],
        steps=steps[-1],
        seconds=times[-1],
        sps=steps[-1] / times[-1] if times[-1] > 0 else math.nan,
        final=final_value(steps, values),
        best=max((v for v in values if math.isfinite(v)), default=math.nan),
        to_reference=to_reference,
        precision=summary["precision"],
        curve=[(t, v) for t, v in zip(times, values, strict=True) if math.isfinite(v)],
    )


def _float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


# ------------------------------------------------------------------------------- running


def finished(run_dir: Path, budget_s: float | None = None) -> bool:
    """The run in ``run_dir`` ran to its end, or was stopped by a budget of training seconds
    this call's ``budget_s`` has used up too (a larger budget trains it on); not interrupted."""
    try:
        summary = read_summary(run_dir)
    except BrokenRun:
        return False
    if summary is None or summary["interrupted"]:
        return False
    if not summary["stopped_early"]:
        return True
    if budget_s is None:
        return False
    try:
        with open(run_dir / "metrics.csv", newline="") as f:
            last = next(reversed(list(csv.DictReader(f))), {})
    except (OSError, UnicodeDecodeError, csv.Error):  # no rows to read: train it (again)
        return False
    return _float(last.get("time_s")) >= budget_s


def train(config, run_dir: Path, budget_s: float | None, echo) -> None:
    """Run ``config`` into ``run_dir`` (resuming a run cut short), within ``budget_s``
    training seconds when given."""
    from fasttrain.run.runner import run

    def on_row(row: dict) -> bool:
        return budget_s is not None and row["time_s"] >= budget_s

    resume = run_dir if (run_dir / "checkpoint.pt").exists() else None
    run(config, out=None if resume else run_dir, resume=resume, echo=echo, on_row=on_row)


def read_or_train(config, run_dir: Path, seed: int, budget_s, echo) -> RunResult:
    """The result of ``config``'s run in ``run_dir``: read where it finished before, trained
    (or resumed) otherwise. A folder of another run, or with files that cannot be read as a
    run's, is set aside (see ``fasttrain.bench.folders``) and the run trained again."""
    game = config.game.name
    problem, result = foreign(run_dir, config), None
    if problem is None and finished(run_dir, budget_s):
        try:
            result = read_result(run_dir, game, seed, REFERENCES[game])
            echo(f"{run_dir}: finished before, read as it is")
        except BrokenRun as exc:
            problem = str(exc)
    if problem is not None:
        aside = set_aside(run_dir)
        echo(f"{run_dir}: {problem}; moved to {aside.name}, training it again")
    if result is None:
        echo(f"{game} seed {seed}: training into {run_dir}")
        train(config, run_dir, budget_s, echo=lambda *a, **k: None)
        try:
            result = read_result(run_dir, game, seed, REFERENCES[game])
        except BrokenRun as exc:  # a resumed run that had ended before its summary was written
            raise BrokenRun(f"{run_dir}: {exc}; move the folder aside to train it again") from None
    return result


def population_folder_problem(folder: Path, configs: dict) -> str | None:
    """Why ``folder`` does not hold the population of ``configs`` (seed -> config) this call
    plans, or holds files that cannot be read as its; None where it does, or holds nothing."""
    from fasttrain.run.population import is_population, member_dir, saved_members

    if not folder.exists() or not any(folder.iterdir()):
        return None
    if not is_population(folder):
        return "it holds no population.json to tell what made it"
    try:
        members = saved_members(folder)
    except ConfigError as exc:
        return str(exc)
    seeds = [m.seed for m in members]
    if seeds != list(configs) or any(m.sets for m in members):
        planned = ", ".join(map(str, configs))
        return (
            f"its population.json has the members {[m.name for m in members]}, this call "
            f"trains seeds {planned}"
        )
    for m in members:
        problem = foreign(member_dir(folder, m), configs[m.seed])
        if problem is not None:
            return f"{m.name}: {problem}"
    return None


def read_or_train_population(configs: dict, folder: Path, budget_s, echo) -> list[RunResult]:
    """The results of the population of ``configs`` (seed -> config) in ``folder``: read where
    every member finished before, trained (or resumed from the members' checkpoints)
    otherwise; a folder of another population, or with files that cannot be read as its, is
    set aside and the population trained again."""
    from fasttrain.run.population import Member, member_dir
    from fasttrain.run.runner import run

    seeds = list(configs)
    first = configs[seeds[0]]
    game = first.game.name
    members = [Member(f"seed-{seed}", seed, (), config) for seed, config in configs.items()]
    folders = [member_dir(folder, m) for m in members]

    def results():
        return [
            dataclasses.replace(read_result(f, game, seed, REFERENCES[game]), members=len(members))
            for f, seed in zip(folders, seeds, strict=True)
        ]

    problem = population_folder_problem(folder, configs)
    if problem is None and all(finished(f, budget_s) for f in folders):
        try:
            found = results()
            echo(f"{folder}: finished before, read as it is")
            return found
        except BrokenRun as exc:
            problem = str(exc)
    saved = [(f / "checkpoint.pt").exists() for f in folders]
    if problem is None and folder.exists() and any(folder.iterdir()) and not all(saved):
        problem = "not every member has a checkpoint to continue from"
    if problem is not None:
        aside = set_aside(folder)
        echo(f"{folder}: {problem}; moved to {aside.name}, training it again")
        saved = [False]
    echo(f"{game} seeds {', '.join(map(str, seeds))}: training as one population into {folder}")

    def on_row(row: dict) -> bool:
        return budget_s is not None and row["time_s"] >= budget_s

    resume = folder if all(saved) else None
    run(
        first,
        out=None if resume else folder,
        resume=resume,
        echo=lambda *a, **k: None,
        on_row=on_row,
        members=None if resume else members,
    )
    try:
        return results()
    except BrokenRun as exc:
        raise BrokenRun(f"{folder}: {exc}; move the folder aside to train it again") from None


def suite_config(game: str, algo: str, seed: int, steps: int | None, device: str, sets):
    """The default config of ``game`` and ``algo`` (see ``learner_of``) with ``--set`` items,
    the seed, the device, no progress bar and no curves.png (the suite draws its own)."""
    from fasttrain.config import resolve as cfg

    flags = {
        "run": {"algo": algo, "seed": seed, "device": device},
        "game": {"name": game},
        "log": {"progress": False, "curves": False},
    }
    if steps is not None:
        flags["game"][game] = {algo: {"total_timesteps": steps}}
    return cfg.build([*cfg.user_layers(None, sets), ("bench --learning", flags)])


def learner_of(game: str, algo: str | None) -> str:
    """``algo``, or where None the game's own learner (its preset's ``[run] algo``)."""
    from fasttrain.config.presets import learner_of as preset_learner

    return algo or preset_learner(game)


def as_population(configs: dict, solo: bool) -> bool:
    """Whether a game's seeds (``configs``: seed -> config) train as one population: more than
    one seed, a learner that trains populations, and no ``--solo``."""
    if solo or len(configs) < 2:
        return False
    from fasttrain.learners.population import population_problem

    return population_problem(next(iter(configs.values()))) is None


def run_suite(
    games,
    seeds,
    algo: str | None,
    budget_s,
    steps,
    device: str,
    sets,
    out,
    echo=click.echo,
    solo: bool = False,
) -> list[RunResult]:
    """Train every game x seed not finished in ``out`` yet, each with ``algo`` (None: the
    game's own learner), a game's seeds as one population where its learner trains
    populations (``solo``: one after another), then write the table, the JSON and the
    picture; returns every run's result."""
    from fasttrain import games as registry
    from fasttrain.bench.report import load_average

    unknown = [g for g in games if g not in registry.names()]
    if unknown:
        raise ConfigError(f"unknown game {unknown[0]!r}; valid: {', '.join(registry.names())}")
    missing = [g for g in games if g not in REFERENCES]
    if missing:
        raise ConfigError(f"no reference score for {missing[0]!r}; valid: {', '.join(REFERENCES)}")
    out = Path(out)
    configs = {
        (game, seed): suite_config(game, learner_of(game, algo), seed, steps, device, sets)
        for game in games
        for seed in seeds
    }  # every config is checked before the first run starts
    out.mkdir(parents=True, exist_ok=True)
    load = load_average()  # before the first run: the machine's load, not the suite's own
    results = []
    started = time.perf_counter()
    for game in games:
        mine = {seed: configs[game, seed] for seed in seeds}
        name = f"{game}-{learner_of(game, algo)}"
        if as_population(mine, solo):
            found = read_or_train_population(mine, out / f"{name}-population", budget_s, echo)
        else:
            found = [
                read_or_train(c, out / f"{name}-seed{s}", s, budget_s, echo)
                for s, c in mine.items()
            ]
        for result in found:
            echo(
                f"  seed {result.seed}: final {REFERENCES[game].metric} {result.final:.2f} "
                f"(best row {result.best:.2f}) after {result.steps:,} steps in "
                f"{result.seconds:.0f} s at {result.sps:,.0f} SPS"
            )
        results.extend(found)
    changes = [f"--set {item}" for item in sets]  # what this call changed, for the header
    for flag, value in (("--algo", algo), ("--steps", steps), ("--budget", budget_s)):
        if value:
            changes.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    if solo:
        changes.append("--solo")
    write(results, out, time.perf_counter() - started, load, changes)
    return results


# ------------------------------------------------------------------------------- writing


def _median(values) -> float:
    return statistics.median(values) if values else math.nan


def _seconds(times: list) -> str:
    """The median of the seeds' times to a share; a seed that never got there counts as
    infinitely slow, so a median that is not a number reads "not reached"."""
    ordered = sorted(math.inf if t is None else t for t in times)
    median = _median(ordered)
    reached = sum(t is not None for t in times)
    if not math.isfinite(median):
        return f"not reached ({reached}/{len(times)})"
    return f"{median:.0f}" + ("" if reached == len(times) else f" ({reached}/{len(times)})")


def table(results: list[RunResult]) -> str:
    """The Markdown table of ``learning.md``: one row per game."""
    header = (
        "| game | algo | seeds | median final | worst final | reference | "
        "s to 50% (median) | s to 90% (median) | SPS (median) | precision | s per run | "
        "trained | s, all seeds |"
    )
    lines = [header, "|" + " --- |" * (header.count("|") - 1)]
    for game in dict.fromkeys(r.game for r in results):
        runs = [r for r in results if r.game == game]
        ref = REFERENCES[game]
        finals = [r.final for r in runs]
        lines.append(
            f"| {game} | {', '.join(sorted({r.algo for r in runs}))} | "
            f"{', '.join(str(r.seed) for r in runs)} | "
            f"{_median(finals):.1f} | {min(finals):.1f} | {ref.value:g} {ref.metric} "
            f"({ref.source}) | {_seconds([r.to_reference['50%'] for r in runs])} | "
            f"{_seconds([r.to_reference['90%'] for r in runs])} | "
            f"{_median([r.sps for r in runs]):,.0f} | "
            f"{', '.join(sorted({r.precision for r in runs}))} | "
            f"{_median([r.seconds for r in runs]):.0f} | {_trained(runs)} | "
            f"{_all_seconds(runs):.0f} |"
        )
    return "\n".join(lines) + "\n"


def _trained(runs: list[RunResult]) -> str:
    """How a game's seeds trained: one population (a process) or one run after another."""
    if len(runs) > 1 and all(r.members == len(runs) for r in runs):
        return f"one population of {len(runs)}"
    return "one by one"


def _all_seconds(runs: list[RunResult]) -> float:
    """The training seconds all of a game's seeds took: a population's (its members train at
    once), or the sum of runs made one after another."""
    if _trained(runs).startswith("one population"):
        return max(r.seconds for r in runs)
    return sum(r.seconds for r in runs)


def write(results: list[RunResult], out: Path, wall_s: float, load_at_start, changes=()) -> None:
    """``learning.md``, ``learning.json`` and (with matplotlib) ``learning.png`` in ``out``;
    ``load_at_start``: the load average before the first run."""
    import numba

    from fasttrain.bench.report import machine_class_line, machine_info
    from fasttrain.run.rundir import json_safe, write_atomic

    machine = {**machine_info(numba.get_num_threads()), "load_average_at_start": load_at_start}
    when = time.strftime("%Y-%m-%d")
    cores = machine.get("cpu_affinity") or machine.get("cpu_count")
    algos = ", ".join(sorted({r.algo for r in results}))
    # what the call changed on the presets, so the table never calls an ablation the defaults
    changed = f" with {' '.join(changes)}" if changes else ""
    text = (
        f"Learning with the default presets ({algos}){changed}, {machine.get('cpu', '?')} "
        f"({machine_class_line(machine)}), {cores} cores, {when}. Final: the mean of the "
        f"metrics rows in the last {FINAL_SHARE:.0%} of a run's steps; seconds are training "
        "seconds (a population's: every member's, its members training at once).\n\n"
    ) + table(results)
    write_atomic(out / "learning.md", text)
    payload = {
        "machine": machine,
        "date": when,
        "algos": {r.game: r.algo for r in results},
        "wall_s": round(wall_s, 1),
        "changes": list(changes),
        "final_share": FINAL_SHARE,
        "references": {g: dataclasses.asdict(r) for g, r in REFERENCES.items()},
        "runs": [{k: v for k, v in dataclasses.asdict(r).items() if k != "curve"} for r in results],
    }
    write_atomic(out / "learning.json", json.dumps(json_safe(payload), indent=2) + "\n")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    draw(results, out / "learning.png")


def draw(results: list[RunResult], path: Path) -> None:
    """One panel per game: the median over seeds against training seconds, min-max banded."""
    import io

    import numpy as np

    from fasttrain.plot import _pyplot
    from fasttrain.run.rundir import write_atomic

    plt = _pyplot()
    games = list(dict.fromkeys(r.game for r in results))
    columns = min(3, len(games))
    rows = -(-len(games) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
    for ax, game in zip(axes.flat, games, strict=False):
        runs = [r for r in results if r.game == game and r.curve]
        if not runs:
            continue
        end = min(r.curve[-1][0] for r in runs)
        grid = np.linspace(0.0, end, GRID)
        curves = np.array(
            [np.interp(grid, [t for t, _ in r.curve], [v for _, v in r.curve]) for r in runs]
        )
        ax.fill_between(grid, curves.min(axis=0), curves.max(axis=0), alpha=0.25)
        ax.plot(grid, np.median(curves, axis=0), label=f"median of {len(runs)} seeds")
        ref = REFERENCES[game]
        ax.axhline(ref.value, color="gray", linestyle="--", linewidth=1, label=ref.source)
        ax.set_title(game)
        ax.set_xlabel("training seconds")
        ax.set_ylabel(f"mean {ref.metric}")
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(games) :]:
        ax.axis("off")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    write_atomic(path, buffer.getvalue())
