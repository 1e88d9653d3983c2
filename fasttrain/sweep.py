"""Hyperparameter search with Optuna (``fasttrain sweep``): time to a target, or the final mean
return or score within a budget.

A sweep file (``fasttrain.sweepfile``) is a config file plus a ``[sweep]`` table.

Each trial is a normal run directory ``DIR/trial-0000`` (``DIR/trial-0000-seed<n>`` per seed
when ``seeds`` > 1) written by ``fasttrain.run.runner.run``, so ``fasttrain play --checkpoint``
works on it. ``DIR/trials.csv`` and ``DIR/best.toml`` (the best trial's full config, for
``fasttrain run --config``) are rewritten after every trial.

Values (``seeds`` > 1: the median over the seeds):

- ``time_to_target`` (minimised): training seconds (``time_s``: start-up and compilation are
  not counted) at the first metrics row whose mean return or score reaches ``target`` within
  ``budget_s``. A trial that does not reach it gets ``budget_s * (1 + shortfall)``, shortfall =
  ``(target - best mean) / max(|target|, 1)``: after every trial that reached it, closer ones
  first (inf when no episode ended).
- ``final_return`` / ``final_score`` (maximised): the mean of the metrics rows in the last
  twentieth of the run (``budget_s / POINTS`` seconds, or without a time limit
  ``total_timesteps / POINTS`` steps, up to the last row that had a value), when ``budget_s``
  training seconds are up (0: no time limit; total_timesteps ends the run). One row holds only
  the few episodes of one iteration, too few to rank trials by.

Pruning (``pruner = "median"``): from the sixth trial on, a trial past the first quarter of
its budget (time_to_target) or its first half (final_*: early scores rank trials poorly there;
on Snake, settings that explore more led the end after trailing at a quarter) is stopped when
its value is behind the median of earlier trials at the same point. A trial reports at
``POINTS`` points of its budget (every ``budget_s / POINTS`` training seconds; without a time
limit every ``total_timesteps / POINTS`` steps of the base config) the value it would get
from its best mean so far: monotone, in the study's direction. Points of time or steps rather
than iterations keep trials with different ``num_envs`` comparable. Only the first seed's run
reports.

Populations (``--population N``): ``N`` trials at a time train side by side as one PPO or PQN
population in one process (``fasttrain.run.population``), in ``DIR/population-0000/`` (the
number of its first trial), each trial's seeds its members ``trial-0000`` (``-seed<n>``): normal
run directories. Every param must be a learner setting members may vary
(``POPULATION_VARIABLE`` of the learner's config module), refused in one line before any trial
otherwise. A trial that reaches its target, its budget or its pruning point stops alone, the
others go on; a population's ``budget_s`` is its own training seconds, every member training at
once.

The study lives in ``DIR/study.db`` (Optuna's SQLite storage): the same sweep into the same
``DIR`` again continues it up to ``trials`` finished trials. Before any trial, a continued
study must be this sweep's (``sweepfile.study_difference``): another ``[sweep]`` (seed too),
params or base config is refused in one line naming it, and so is an error reading or writing
the database (``DIR/study.db: <why>``). The TPE sampler is seeded with ``seed``: a fresh sweep
tries the same params in its random start-up trials, and after them as long as the values
repeat (time_to_target's are seconds, so they do not, quite); a continued study seeds it with
``seed`` + the trials so far, so it does not repeat their picks. A trial killed with its
process (``kill -9``) stays ``running`` in the study and does not count.
"""

from __future__ import annotations

import collections
import contextlib
import csv
import io
import math
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import click

from fasttrain.config import resolve as cfg
from fasttrain.config.file import to_toml
from fasttrain.errors import ConfigError, RunError, one_line, reason
from fasttrain.run.rundir import check_regular, check_writable, write_atomic
from fasttrain.sweepfile import (
    OBJECTIVES,
    Sweep,
    SweepSettings,
    load,
    population_problem,
    study_difference,
)
from fasttrain.targets import Target

POINTS = 20  # pruning reports per trial budget
STUDY_NAME = "fasttrain-sweep"  # the one study of a study.db
NEEDS_OPTUNA = "fasttrain sweep needs optuna: pip install 'fasttrain[sweep]'"


@dataclass(frozen=True)
class TrialResult:
    """One trial of a study, as the table and trials.csv show it."""

    number: int
    state: str  # complete | pruned | failed | running
    value: float | None
    params: dict
    note: str  # how it ended, in one line
    run_dirs: tuple[str, ...]


def require_optuna():
    """The optuna module, or a one-line ConfigError saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise ConfigError(NEEDS_OPTUNA) from None
    return optuna


# ------------------------------------------------------------------------------- WATCH


class Watch:
    """The ``on_row`` callback of one trial run: tracks the metric, stops the run at the target
    or at ``budget_s``, and reports to an Optuna trial for pruning."""

    def __init__(self, sweep: Sweep, trial=None):
        s = sweep.settings
        self.objective, self.budget_s = s.objective, s.budget_s
        metric = (
            s.target_metric if s.objective == "time_to_target" else s.objective[len("final_") :]
        )
        goal = s.target if s.objective == "time_to_target" else math.inf
        self.target = Target(metric, goal, stop=False)
        self.trial = trial
        if s.budget_s > 0:
            self.axis, self.spacing = "time_s", s.budget_s / POINTS
        else:
            self.axis = "global_step"
            self.spacing = max(1, sweep.base.learner.total_timesteps // POINTS)
        self.reported = -1  # the last point reported
        self.time_s, self.steps = 0.0, 0
        # (axis position, mean) of the rows with a mean in the last spacing before the newest
        self.tail: collections.deque = collections.deque()
        self.best_final = -math.inf  # the highest ``final`` so far

    @property
    def final(self) -> float:
        """final_*: the mean of the rows in the run's last ``spacing`` (-inf before any)."""
        if not self.tail:
            return -math.inf
        return statistics.fmean(value for _, value in self.tail)

    @property
    def reached(self) -> bool:
        """time_to_target: reached within the budget."""
        t = self.target
        return self.objective == "time_to_target" and t.reached and t.seconds <= self.budget_s

    def value(self) -> float:
        """The trial's value if its run ended now."""
        t = self.target
        if self.objective != "time_to_target":
            return self.final
        if self.reached:
            return t.seconds
        shortfall = (t.value - t.best) / max(abs(t.value), 1.0)
        return self.budget_s * (1.0 + max(shortfall, 0.0))

    def progress(self) -> float:
        """The value a pruner compares: from the best mean so far, so it only improves."""
        if self.objective == "time_to_target":
            return self.value()
        return self.best_final

    def note(self) -> str:
        """How the run ended, in a few words."""
        t, name = self.target, self.target.metric
        if self.objective != "time_to_target":
            rows = f"mean of the last {len(self.tail)} rows, best row {t.best:.4g}"
            return (
                f"final {name} {self.final:.4g} ({rows}) at {self.time_s:.1f} s, "
                f"{self.steps:,} steps"
            )
        if self.reached:
            return f"reached {name} {t.value:g} at {t.seconds:.2f} s, {t.steps:,} steps"
        return (
            f"best {name} {t.best:.4g} of {t.value:g} in {self.time_s:.1f} s, {self.steps:,} steps"
        )

    def __call__(self, row: dict) -> bool:
        self.target(row)
        self.time_s, self.steps = float(row["time_s"]), int(row["global_step"])
        position, value = float(row[self.axis]), self.target.read(row)
        if math.isfinite(value):
            self.tail.append((position, value))
            while self.tail[0][0] < position - self.spacing:
                self.tail.popleft()
            self.best_final = max(self.best_final, self.final)
        if self.reached or 0 < self.budget_s <= self.time_s:
            return True
        point = int(row[self.axis] // self.spacing)
        if self.trial is not None and point > self.reported:
            value = self.progress()
            if math.isfinite(value):  # no episode has ended yet: nothing to compare
                self.trial.report(value, point)
                self.reported = point
                if self.trial.should_prune():
                    import optuna

                    raise optuna.TrialPruned(
                        f"pruned at {self.time_s:.1f} s, {self.steps:,} steps: {value:.4g} "
                        "behind the median"
                    )
        return False


# ------------------------------------------------------------------------------- STUDY


def sweep(
    source, out=None, sets=(), trials=None, seed=None, echo=click.echo, population: int = 1
) -> list:
    """Run a sweep into ``out`` and return every trial of its study as TrialResult, best first.

    ``source``: a Sweep, or the path of a sweep file (with ``sets``, ``trials`` and ``seed`` as
    ``load`` takes them); ``population``: trials trained at a time as one population. Ctrl-C
    stops the trials in flight at an iteration boundary, writes trials.csv and best.toml,
    prints the table and re-raises.
    """
    optuna = require_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = source if isinstance(source, Sweep) else load(source, sets, trials, seed)
    if population > 1:
        problem = population_problem(spec)
        if problem:
            raise ConfigError(problem)
    out = Path(out or default_out(spec.base))
    study = open_study(spec, out, optuna)
    with study_errors(out / "study.db", optuna):
        echo(_first_line(spec, _finished(study, optuna), population, out))
        results = _run_study(spec, study, out, echo, optuna, population)
    best = results[0] if results and results[0].state == "complete" else None
    if best is not None:
        echo(f"best: trial {best.number} | fasttrain run --config {out / 'best.toml'}")
    return results


def _run_study(spec: Sweep, study, out: Path, echo, optuna, population: int) -> list:
    """Ask, run and tell trials until the study holds ``trials`` finished ones; write and print
    the results (on Ctrl-C too, then re-raise) and return them best first."""
    distributions = {p.key: p.distribution() for p in spec.params}
    asked: list = []
    try:
        while _finished(study, optuna) < spec.settings.trials:
            wanted = min(population, spec.settings.trials - _finished(study, optuna))
            asked = [study.ask(distributions) for _ in range(wanted)]
            if len(asked) == 1:
                finished = [_run_trial(spec, study, asked[0], out, echo, optuna)]
            else:
                finished = _run_population(spec, study, asked, out, echo, optuna)
            for trial in finished:
                if not trial.state.is_finished():  # Optuna drops a write that sqlite aborts
                    raise RunError(
                        f"{out / 'study.db'}: refused to store how trial {trial.number} ended"
                    )
                echo(_line(_result(trial, optuna), spec))
            asked = []
            write_results(spec, study, out, optuna)
    except KeyboardInterrupt:
        for trial in asked:
            trial.set_user_attr("note", "interrupted")
            study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        results = write_results(spec, study, out, optuna)
        echo(table(results, spec))
        kept = " and best.toml" if (out / "best.toml").exists() else ""
        echo(f"interrupted: trials.csv{kept} in {out} hold the trials so far")
        raise
    results = write_results(spec, study, out, optuna)
    echo(table(results, spec))
    return results


def _first_line(spec: Sweep, done: int, population: int, out: Path) -> str:
    """A sweep's first line: its trials, game and learner, objective, budget and folder."""
    s = spec.settings
    if s.objective == "time_to_target":
        goal = f"seconds to a mean {s.target_metric} of {s.target:g}, lower is better"
    else:
        goal = f"{s.objective.replace('_', ' ')}, higher is better"
    budget = f"{s.budget_s:g} s per trial" if s.budget_s else "no time limit"
    at_once = f" | {population} trials at a time as one population" if population > 1 else ""
    return (
        f"fasttrain sweep: {s.trials} trials of {spec.base.game.name} {spec.base.run.algo}"
        f"{f' ({done} done)' if done else ''} | {s.objective} ({goal}) | {budget}{at_once} | "
        f"{out}"
    )


def default_out(config: cfg.Config) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"sweep-{config.game.name}-{config.run.algo}-{stamp}"


def make_pruner(settings: SweepSettings, optuna):
    """The study's pruner: Optuna's median rule past the warm-up the module docstring gives."""
    if settings.pruner != "median":
        return optuna.pruners.NopPruner()
    warmup = POINTS // 4 if settings.objective == "time_to_target" else POINTS // 2
    return optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=warmup)


def open_study(spec: Sweep, out: Path, optuna):
    """The study in ``out/study.db``, made, or continued once it is checked to be this sweep's
    (``sweepfile.study_difference``); a damaged study or another sweep's is refused in one line."""
    from sqlalchemy.exc import SQLAlchemyError  # Optuna's storage layer

    db = out / "study.db"
    check_writable(out)
    made = out.is_dir() and (any(out.glob("trial-*")) or any(out.glob("population-*")))
    if not check_regular(db, "read") and made:
        raise ConfigError(f"{out} holds trial directories but no study.db; choose another --out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"cannot create sweep directory {out}: {reason(exc)}") from None
    s = spec.settings
    try:
        storage = optuna.storages.RDBStorage(f"sqlite:///{db.resolve()}")
        existed = STUDY_NAME in optuna.study.get_all_study_names(storage)
    except (SQLAlchemyError, RuntimeError) as exc:  # damaged, or another program's database
        raise ConfigError(
            f"{db} is not a study database this sweep can read: {one_line(exc)}; "
            "choose another --out"
        ) from None
    # a row of a study.db may hold anything (it is data, never code): reading one that does not
    # read back as a study's (an unknown distribution, a mangled value) is refused in one line
    with study_errors(db, optuna, reading=(ValueError, TypeError, LookupError, RecursionError)):
        sampler = optuna.samplers.TPESampler(seed=s.seed)
        where = dict(study_name=STUDY_NAME, storage=storage, pruner=make_pruner(s, optuna))
        if existed:
            study = optuna.load_study(**where, sampler=sampler)
            problem = study_difference(spec, study)
            if problem:
                raise ConfigError(f"{db} holds another sweep: {problem}; choose another --out")
        else:
            study = optuna.create_study(**where, sampler=sampler, direction=OBJECTIVES[s.objective])
            study.set_user_attr("sweep", spec.record())
        if study.trials:  # continued: a sampler seeded as a fresh one would repeat its picks
            study.sampler = optuna.samplers.TPESampler(seed=s.seed + len(study.trials))
    return study


def storage_errors(optuna) -> tuple:
    """What Optuna's SQLite storage raises where study.db refuses a read or a write (a trigger,
    a lock, a damaged page)."""
    from sqlalchemy.exc import SQLAlchemyError

    return (SQLAlchemyError, optuna.exceptions.StorageInternalError, sqlite3.Error)


@contextlib.contextmanager
def study_errors(db: Path, optuna, reading: tuple = ()):
    """Turn an error of the study's storage (and ``reading``'s types, where only the storage
    runs) into one line ``<db>: <what failed>``; one-line refusals pass as they are."""
    try:
        yield
    except ConfigError:
        raise
    except (*storage_errors(optuna), *reading) as exc:
        if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__:
            exc = exc.__cause__  # Optuna's own line is a generic "an exception is raised..."
        raise RunError(f"{db}: {one_line(exc)}") from None


def _finished(study, optuna) -> int:
    states = optuna.trial.TrialState
    finished = (states.COMPLETE, states.PRUNED, states.FAIL)
    return len(study.get_trials(deepcopy=False, states=finished))


def _run_trial(spec: Sweep, study, trial, out: Path, echo, optuna):
    """Run one trial's seeds, tell the study how it ended and return the finished trial."""
    from fasttrain.run.runner import run

    FAIL, PRUNED = optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED
    values, notes, dirs = [], [], []

    def quiet(line="", **kwargs):  # a trial's log lines would drown the table; warnings stay
        if str(line).lstrip().startswith("warning"):
            echo(f"trial {trial.number}: {str(line).strip()}", **kwargs)

    try:
        first = spec.trial_config(trial.params)
        for i in range(spec.settings.seeds):
            seed = first.run.seed + i
            name = f"trial-{trial.number:04d}" + (f"-seed{seed}" if spec.settings.seeds > 1 else "")
            dirs.append(str(out / name))
            trial.set_user_attr("run_dirs", dirs)
            config = spec.trial_config(
                trial.params, {"run": {"seed": seed}, "log": {"progress": False}}
            )
            watch = Watch(spec, trial if i == 0 else None)
            run(config, out=out / name, echo=quiet, on_row=watch)
            values.append(watch.value())
            notes.append(watch.note())
    except optuna.TrialPruned as exc:
        trial.set_user_attr("note", str(exc))
        return study.tell(trial, state=PRUNED)
    except storage_errors(optuna):  # study.db refused a report: not this trial's failure
        raise
    except ConfigError as exc:  # the sampled values make an invalid config, a full disk, ...
        trial.set_user_attr("note", str(exc).splitlines()[0])
        return study.tell(trial, state=FAIL)
    except Exception as exc:  # one trial's crash (out of memory, ...) does not end the sweep
        trial.set_user_attr(
            "note", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        )
        return study.tell(trial, state=FAIL)
    note = (
        notes[0]
        if len(notes) == 1
        else f"median of {len(notes)} seeds; seed {first.run.seed}: {notes[0]}"
    )
    trial.set_user_attr("note", note)
    return study.tell(trial, statistics.median(values))


class MemberWatch:
    """A population member's ``on_row``: the trial's ``Watch``, its pruning kept as a note (a
    pruned member ends alone; the others go on)."""

    def __init__(self, watch: Watch):
        self.watch, self.pruned = watch, None

    def __call__(self, row: dict) -> bool:
        import optuna

        try:
            return self.watch(row)
        except optuna.TrialPruned as exc:
            self.pruned = str(exc)
            return True


def _run_population(spec: Sweep, study, trials: list, out: Path, echo, optuna) -> list:
    """Run ``trials`` (each with its seeds) as one population, tell the study how each ended
    and return the finished trials."""
    from fasttrain.run.population import Member
    from fasttrain.run.runner import run

    FAIL = optuna.trial.TrialState.FAIL
    folder = out / f"population-{trials[0].number:04d}"
    members, watches, plan = [], [], []  # plan: per trial, its members' indices
    try:
        for trial in trials:
            first = spec.trial_config(trial.params)
            mine, dirs = [], []
            for i in range(spec.settings.seeds):
                seed = first.run.seed + i
                name = f"trial-{trial.number:04d}"
                name += f"-seed{seed}" if spec.settings.seeds > 1 else ""
                config = spec.trial_config(
                    trial.params, {"run": {"seed": seed}, "log": {"progress": False}}
                )
                mine.append(len(members))
                members.append(Member(name, seed, (), config))
                watches.append(MemberWatch(Watch(spec, trial if i == 0 else None)))
                dirs.append(str(folder / name))
            trial.set_user_attr("run_dirs", dirs)
            plan.append(mine)
    except ConfigError as exc:  # the sampled values make an invalid config: every trial fails
        for trial in trials:
            trial.set_user_attr("note", str(exc).splitlines()[0])
        return [study.tell(t, state=FAIL) for t in trials]

    def quiet(line="", **kwargs):  # the population's lines would drown the table
        if str(line).lstrip().startswith(("warning", "member")):
            echo(f"trials {trials[0].number}-{trials[-1].number}: {str(line).strip()}", **kwargs)

    try:
        first = members[0].config
        result = run(first, out=folder, echo=quiet, on_row=watches, members=members)
    except (ConfigError, RunError) as exc:  # a refusal, or every member diverged
        note = str(exc).splitlines()[0]
        for trial in trials:
            trial.set_user_attr("note", note)
        return [study.tell(t, state=FAIL) for t in trials]
    rows = result["member_rows"]
    ended = zip(trials, plan, strict=True)
    return [_tell(study, trial, mine, watches, rows, optuna) for trial, mine in ended]


def _tell(study, trial, mine: list, watches: list, rows: list, optuna):
    """Tell the study how ``trial`` ended, from its members (``mine``: their indices): pruned,
    failed where one stopped on non-finite updates, else the median of its seeds' values."""
    first = watches[mine[0]]
    if first.pruned is not None:
        trial.set_user_attr("note", first.pruned)
        return study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    if any(rows[k]["stopped_alone"] for k in mine):
        trial.set_user_attr("note", "stopped on non-finite updates")
        return study.tell(trial, state=optuna.trial.TrialState.FAIL)
    notes = [watches[k].watch.note() for k in mine]
    values = [watches[k].watch.value() for k in mine]
    note = notes[0] if len(notes) == 1 else f"median of {len(notes)} seeds; first: {notes[0]}"
    trial.set_user_attr("note", note)
    return study.tell(trial, statistics.median(values))


# ------------------------------------------------------------------------------- REPORT


def ranked_results(spec: Sweep, study, optuna) -> list[TrialResult]:
    """Every trial of the study, best first: complete ones by value, then pruned, failed."""
    out = [_result(t, optuna) for t in study.get_trials(deepcopy=False)]
    sign = 1.0 if OBJECTIVES[spec.settings.objective] == "minimize" else -1.0
    order = {"complete": 0, "pruned": 1, "failed": 2}

    def rank(r: TrialResult):
        value = sign * r.value if r.state == "complete" else 0.0
        return (order.get(r.state, 3), value, r.number)

    return sorted(out, key=rank)


def _result(trial, optuna) -> TrialResult:
    states = {
        optuna.trial.TrialState.COMPLETE: "complete",
        optuna.trial.TrialState.PRUNED: "pruned",
        optuna.trial.TrialState.FAIL: "failed",
    }
    return TrialResult(
        number=trial.number,
        state=states.get(trial.state, trial.state.name.lower()),
        value=trial.value,
        params=dict(trial.params),
        note=trial.user_attrs.get("note", ""),
        run_dirs=tuple(trial.user_attrs.get("run_dirs", ())),
    )


def write_results(spec: Sweep, study, out: Path, optuna) -> list[TrialResult]:
    """Write ``out/trials.csv`` (by trial number) and ``out/best.toml``; return the results."""
    ranked = ranked_results(spec, study, optuna)
    keys = [p.key for p in spec.params]
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["trial", "state", "value", *keys, "note", "run_dir"])
    for r in sorted(ranked, key=lambda r: r.number):
        value = "" if r.value is None else repr(r.value)
        params = [r.params.get(k, "") for k in keys]
        writer.writerow([r.number, r.state, value, *params, r.note, ";".join(r.run_dirs)])
    write_atomic(out / "trials.csv", text.getvalue())
    if ranked and ranked[0].state == "complete":
        best = ranked[0]
        sampled = ", ".join(f"{k}={v!r}" for k, v in best.params.items())
        header = (
            f"# The best trial of `fasttrain sweep` in {out}: trial {best.number}, "
            f"{spec.settings.objective} {best.value:.6g} ({best.note}).\n"
            f"# Sampled: {sampled}\n"
            f"# Train with it: fasttrain run --config {out / 'best.toml'} (total_timesteps ends "
            "the run; the sweep's budget_s does not apply)"
        )
        write_atomic(out / "best.toml", to_toml(spec.trial_config(best.params), header))
    return ranked


def short_names(keys) -> dict[str, str]:
    """Each dotted key by its shortest unique tail: ``ppo.learning_rate`` -> ``learning_rate``."""
    names = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if sum(k == tail or k.endswith("." + tail) for k in keys) == 1:
                break
        names[key] = tail
    return names


def _format(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _line(r: TrialResult, spec: Sweep) -> str:
    """The progress line of one finished trial."""
    names = short_names([p.key for p in spec.params])
    params = " ".join(f"{names[k]}={_format(v)}" for k, v in r.params.items())
    return f"trial {r.number:>4}  {r.state:<8}  {_format(r.value):>8}  {params}  {r.note}".rstrip()


def table(ranked: list[TrialResult], spec: Sweep) -> str:
    """The trials best first: trial, state, value, params and note."""
    names = short_names([p.key for p in spec.params])
    rows = [["trial", "state", "value", *names.values(), "note"]]
    for r in ranked:
        params = [_format(r.params.get(k)) for k in names]
        rows.append([str(r.number), r.state, _format(r.value), *params, r.note])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["", f"{len(ranked)} trials, best first ({spec.settings.objective}):"]
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)] + [row[-1]]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)
