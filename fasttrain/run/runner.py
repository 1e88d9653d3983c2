"""A training run: its directory, log lines, metrics.csv, checkpoints, signals and resume.

A run never loses a good checkpoint: one process owns the run directory (a lock), every file is
written atomically, SIGINT and SIGTERM stop the run at an iteration boundary with a checkpoint,
and weights that are not finite are never saved. The same seed gives the same metrics.csv
(all columns but time and SPS): rows are written every ``log.csv_every`` iterations.

A run trains one member, or a population's members side by side (``fasttrain run --seeds``:
``fasttrain.run.population`` holds what is only about a population's folder), through one loop
(``_train``), one screen: ``trainer.iterate()``, then each live member's parts (see
``fasttrain.run.parts``), in order, at each iteration boundary. A population's member stopped by
its NaN guard, or by its ``on_row``, ends alone (its last good checkpoint stays); a solo run is
the population of one that ends with it.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from fasttrain.config import resolve as cfg
from fasttrain.config.curriculum import Curriculum
from fasttrain.config.file import CONFIG_HEADER, to_toml
from fasttrain.config.presets import has_variant
from fasttrain.config.resolve import Config
from fasttrain.device import resolve_device
from fasttrain.errors import ConfigError, RunError, one_line, reason
from fasttrain.kernels.compiling import notices_to
from fasttrain.learners import distributed, make_trainer, savedstate
from fasttrain.learners.ranks import RankStopped
from fasttrain.run import checkpoint, dashboards, metrics
from fasttrain.run import population as population_run
from fasttrain.run.members import (
    MemberRun,
    MemberView,
    Plan,
    PopulationLine,
    Shared,
    summary,
)
from fasttrain.run.metrics import STAGE_COLUMN  # noqa: F401 - the column's name, for readers
from fasttrain.run.parts import (
    Boundary,
    Checkpointer,
    Clock,
    Console,
    EpisodeStats,
    MetricsRow,
    NanGuard,
    OnRow,
    ProgressBar,
    Promoter,
    Signals,
    Sink,
    TimeLeft,
    check_order,
)
from fasttrain.run.rundir import RunLock, check_writable, write_atomic
from fasttrain.run.startup import RunInterrupted, StopSignals

REPLAY_FPS = 20  # frames per second of a run's replay.gif


def default_out(config: Config) -> Path:
    """``runs/GAME-ALGO-TIMESTAMP``, with ``-2``, ``-3``... where a run started in the same
    second already holds that name (two runs started at once must not collide)."""
    base = f"{config.game.name}-{config.run.algo}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = Path("runs") / base, 1
    while out.exists():
        n += 1
        out = Path("runs") / f"{base}-{n}"
    return out


def pictures(config: Config, out: Path, echo) -> None:
    """At a run's end: ``curves.png`` (``log.curves``, when matplotlib is installed) and
    ``replay.gif`` of the final policy (``log.replay``). A picture that cannot be made is
    reported in one line; the run's results stand."""
    if config.log.curves:
        from fasttrain.plot import write_curves

        try:
            write_curves(out)
        except Exception as exc:  # noqa: BLE001 - a picture never fails a finished run
            echo(f"warning: curves.png not written: {str(exc).splitlines()[0]}")
    if config.log.replay:
        import fasttrain
        from fasttrain import media
        from fasttrain.run.checkpoint import load_agent

        try:  # the saved policy, greedy, in a fresh environment seeded with the run's seed
            act, params = load_agent(out)
            env = fasttrain.make(
                config.game.name,
                num_envs=1,
                backend="cpu",
                seed=config.run.seed,
                action_repeat=config.run.action_repeat,
                **params,
            )
            frames = media.replay_frames(env, config.log.replay_steps, act)
            path = media.write_gif(out / "replay.gif", frames, REPLAY_FPS)
            echo(f"replay: {path} ({len(frames)} frames)")
        except Exception as exc:  # noqa: BLE001
            echo(f"warning: replay.gif not written: {str(exc).splitlines()[0]}")


# ------------------------------------------------------------------------------- the run


def run(
    config: Config,
    out=None,
    resume=None,
    echo=click.echo,
    on_row=None,
    members=None,
    configure=None,
) -> dict:
    """Train with ``config`` (any registered learner) into the run directory ``out``, or
    continue the run in ``resume``; returns the run summary.

    ``members`` (``population_run.Member``s with their configs) trains a population in
    ``out`` instead, one member directory each; ``resume`` of a population's folder continues
    every member (read from its ``population.json``, their configs from their checkpoints with
    ``config``'s total steps, or ``configure(table)`` of each checkpoint's config table: the
    command's settings on top). It returns the population's summary.

    ``on_row(row)`` sees every metrics.csv row (a dict) as it is written (a list of them: member
    ``k``'s rows go to ``on_row[k]``); when it returns true the member ends there as if
    finished (checkpoint, summary with ``stopped_early``). An exception it raises ends the run
    with the last checkpoint kept (a sweep prunes trials that way).

    Under torchrun every rank calls this; rank 0 alone touches the run directory and prints
    (see ``fasttrain.learners.distributed``).
    """
    device_type = resolve_device(config.run.device).type
    ranks = distributed.setup(config.run.dist_backend, device_type, config.run.dist_timeout_s)
    if not ranks.main:
        echo = _silent
    out = Path(resume if resume is not None else out or default_out(config))
    out = Path(distributed.broadcast_object(str(out), ranks))  # rank 0's name (a timestamp)
    population = members is not None or (resume is not None and population_run.is_population(out))
    lock = RunLock(out) if ranks.main else None
    plan = Plan(config, out, resume is not None, population, members, on_row, configure, echo)
    try:
        problem = None
        if ranks.main:
            try:
                if population and ranks.enabled:
                    raise ConfigError("a population trains in one process; drop torchrun")
                check_writable(out)
                if out.exists():  # a live run is refused before any work
                    lock.acquire()
            except (ConfigError, RunError) as exc:
                problem = exc
        agree_or_raise(problem, ranks)
        with notices_to(compile_notices(echo)):  # "compiling snake for the cpu backend..."
            return _run(plan, lock, echo, ranks)
    finally:
        for held in [*plan.locks, *([lock] if lock is not None else [])]:
            held.release()
        distributed.shutdown()


def _silent(*args, **kwargs) -> None:
    """The echo of ranks other than 0: rank 0 speaks for the run."""


def compile_notices(echo):
    """``say(text, end)`` for the kernels' compile notices (``fasttrain.kernels.compiling``)
    through the run's ``echo``: click's echo shows the line as it grows, any other echo gets
    it whole once done."""
    if echo is click.echo:
        return lambda text, end="\n": click.echo(text, nl=end == "\n")
    parts: list[str] = []

    def say(text: str, end: str = "\n") -> None:
        parts.append(text)
        if end == "\n":
            echo("".join(parts))
            parts.clear()

    return say


def agree_or_raise(problem: Exception | None, ranks) -> None:
    """Rank 0's verdict on the checks only it makes, on every rank: rank 0 raises its error,
    the others stop with ``RankStopped`` (rank 0 prints the line)."""
    if not ranks.enabled:
        if problem is not None:
            raise problem
        return
    verdict = distributed.broadcast_object(None if problem is None else str(problem), ranks)
    if problem is not None:
        raise problem
    if verdict is not None:
        raise RankStopped(verdict)


def _on_rank_0(ranks, check):
    """``check()`` on rank 0 (its result there, None elsewhere); every rank raises if it
    raised a user's error."""
    result, problem = None, None
    if ranks.main:
        try:
            result = check()
        except ConfigError as exc:
            problem = exc
    agree_or_raise(problem, ranks)
    return result


def _first_checks(plan: Plan, ranks) -> list[MemberRun]:
    """Rank 0's checks before any work: each member's checkpoint to resume (loaded into its
    ``MemberRun``), its identity, and the extras the run's log settings need."""
    config = plan.config
    if plan.population:
        runs = [MemberRun(*found) for found in population_run.members(plan, plan.locks)]
    else:
        runs = [MemberRun(plan.out, config)]
    for run in runs:
        name = run.member.name if run.member is not None else None
        with population_run.member_errors(plan.out, name):
            if plan.resuming:
                run.state = _resumed_state(run.folder, run.config, ranks, run.state)
            elif (run.folder / checkpoint.FILENAME).exists() or population_run.is_population(
                run.folder
            ):
                raise ConfigError(
                    f"{run.folder} already holds a run; continue it with --resume {run.folder} "
                    "or choose another --out"
                )
    dashboards.check(config.log)  # a missing extra fails in one line before compiling
    if config.log.replay:
        from fasttrain import media

        media.check_media()
    return runs


def _resumed_state(folder: Path, config: Config, ranks, state=None) -> dict:
    """The checkpoint in ``folder``, checked against ``config`` before any work: its counters
    and clock, identity, model size, the settings it cannot follow, its seed, its folder."""
    state = checkpoint.load(folder) if state is None else state
    savedstate.check_common(state, resuming=True)  # counters, clock: before any work
    checkpoint.check_identity(state, config, world=ranks.world)  # fails before compiling
    checkpoint.check_model_size(folder, config, state["model"])  # before a network is built
    saved = checkpoint.saved_config(folder, state)
    cfg.check_resume(saved, config)  # settings the checkpoint's state cannot follow
    if config.run.seed != saved.run.seed:  # a resume restores the streams the seed began
        raise ConfigError(
            f"run.seed = {config.run.seed} on --resume: the run continues the random streams "
            f"of its seed {saved.run.seed}; leave --seed (and run.seed) out"
        )
    written = folder / "config.toml"
    if written.exists():  # a checkpoint copied in from another run does not fit its folder
        try:
            theirs = cfg.from_dict(cfg.load_toml(written), str(written))
            checkpoint.check_identity(state, theirs, world=ranks.world)
        except ConfigError as exc:
            raise ConfigError(f"{folder}/{checkpoint.FILENAME} is not this run's: {exc}") from None
    return state


def _claim(out: Path, lock) -> None:
    """Create the run directory and take its lock (rank 0), unless taken already."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"cannot create run directory {out}: {reason(exc)}") from None
    if not lock.held:
        lock.acquire()
        if (out / checkpoint.FILENAME).exists() or population_run.is_population(out):
            raise ConfigError(f"{out} already holds a run; choose another --out")


def _run(plan: Plan, lock, echo, ranks) -> dict:
    # ---- every check and compile happens before any write; rank 0 checks, every rank agrees
    config = plan.config
    if ranks.enabled and plan.on_row is not None:
        raise ConfigError("on_row needs a single-process run (not under torchrun)")
    runs = _on_rank_0(ranks, lambda: _first_checks(plan, ranks)) or [MemberRun(plan.out, config)]
    if plan.resuming and ranks.enabled:  # each rank continues from its own saved state
        state = runs[0].state
        states = [state, *state.pop("rank_states", [])] if ranks.main else None
        runs = [MemberRun(plan.out, config, distributed.scatter_states(states, ranks))]
    members = [run.config for run in runs] if plan.population else None
    trainer = make_trainer(config, warn=echo, members=members)
    if plan.resuming:
        try:
            trainer.load_members([run.state for run in runs])
        except ConfigError as exc:  # a member's state: its name in the line
            k = getattr(exc, "member", None)
            if not plan.population or k is None:
                raise
            raise population_run.member_error(plan.out, runs[k].member.name, exc) from None
        if trainer.iteration >= trainer.num_iterations:
            return _complete(trainer, plan, echo, ranks)
    curriculum = None
    if config.curriculum:  # the stage's params are set before the first step
        curriculum = Curriculum(config.curriculum, trainer.env, config.params, trainer.global_step)
        saved = runs[0].state.get("curriculum") if runs[0].state is not None else None
        if saved is not None:
            curriculum.load_state_dict(saved)  # a stage this curriculum lacks: one line
        else:
            curriculum.apply()
    _on_rank_0(ranks, lambda: _claim(plan.out, lock))
    if plan.population:
        echo(population_run.first_line(config, [run.member for run in runs], trainer, plan.out))
    else:
        echo(settings_line(config, trainer, plan.out, curriculum))
    if ranks.main:
        for run in runs:
            run.folder.mkdir(exist_ok=True)
            if plan.population and not plan.resuming:  # no other run may write into it
                plan.locks.append(RunLock(run.folder))
                plan.locks[-1].acquire()
            write_atomic(run.folder / "config.toml", to_toml(run.config, CONFIG_HEADER))
        if plan.population:
            population_run.write_population(plan.out, [run.member for run in runs], None)
    outcome = _train(plan, trainer, runs, curriculum, echo, ranks)
    return _finish(plan, trainer, runs, outcome, echo, ranks)


def _complete(trainer, plan: Plan, echo, ranks) -> dict:
    """A resumed run that has nothing left to do says so and writes nothing."""
    echo(
        f"{plan.out} is complete: {trainer.global_step:,} steps of total_timesteps "
        f"{trainer.args.total_timesteps:,}; nothing to do (pass --steps with a larger total "
        "to continue)"
    )
    name = population_run.POPULATION_FILE if plan.population else "summary.json"
    summary_path = plan.out / name
    if not ranks.main or not summary_path.exists():
        return {}
    try:
        return json.loads(summary_path.read_bytes()[: 1 << 24])
    except (OSError, ValueError, RecursionError) as exc:  # damaged: the run stands, unchanged
        echo(f"warning: {summary_path} is unreadable ({one_line(exc)[:80]}); it is left as it is")
        return {}


def settings_line(config: Config, trainer, out: Path, curriculum) -> str:
    """The run's first lines: game, learner, device, the iteration's shape, the steps and the
    run directory, then every setting that differs from its default or that the command line
    gave, with its source; wrapped to fit 120 columns (a continuation is indented)."""
    args = trainer.args
    planned = trainer.num_iterations * trainer.steps_per_iteration
    # with several agents per environment, steps and SPS count agent steps (learner rows)
    unit = "agent steps" if trainer.env.num_agents > 1 else "steps"
    steps = f"{planned:,} {unit}"
    if planned != args.total_timesteps:
        steps += (
            f" (total_timesteps {args.total_timesteps:,} rounded to {trainer.num_iterations:,} "
            f"iterations of {trainer.steps_per_iteration:,})"
        )
    if config.run.action_repeat > 1:  # steps stay learner steps: say what one is
        k = config.run.action_repeat
        steps += f" (action repeat {k}: each step plays up to {k} game steps)"
    algo = config.run.algo
    pieces = [
        f"fasttrain: {config.game.name} on {trainer.device}",
        f"learner: {algo} ([{algo}] applies)",  # no other learner's section does
        *trainer.describe().split(" | "),
        steps,
    ]
    variant = config.run.preset
    if has_variant(config.game.name, variant):  # a preset that depends on the machine
        why = config.sources.get("run.preset", "the run's config").removeprefix("auto: ")
        pieces.insert(2, f"{variant} preset ({why})")
    if curriculum is not None:
        pieces.append(f"curriculum stage {curriculum.stage + 1}/{curriculum.num_stages}")
    pieces.append(f"run dir {out}")
    text = metrics.wrap(pieces, " | ")
    overrides = config.overrides()
    if overrides:
        text += "\n" + metrics.wrap([f"settings: {overrides[0]}", *overrides[1:]], ", ")
    return text


@dataclass
class Outcome:
    """How the loop ended: each member's summary, the signal that stopped it (None: it
    finished), the members stopped by their NaN guard, and each member's last episode means."""

    summaries: list
    stopped_by: int | None
    diverged: set = field(default_factory=set)
    episodes: list = field(default_factory=list)


# ------------------------------------------------------------------------------- the loop


def _train(plan: Plan, trainer, runs: list, curriculum, echo, ranks) -> Outcome:
    """The loop: an iteration, then every live member's parts at its boundary."""
    config, shared = plan.config, Shared(trainer)
    views = [MemberView(trainer, k, run.config, shared) for k, run in enumerate(runs)]
    every = [_parts(plan, views[k], run, curriculum, echo, ranks, k) for k, run in enumerate(runs)]
    # one clock: every member's rows (and so a budget on them) read the same training seconds
    for parts in every[1:]:
        parts.clock.start, parts.clock.offset = every[0].clock.start, every[0].clock.offset
    live, ended, diverged = set(range(len(runs))), {}, set()
    first_step, stopped_by, line = trainer.global_step, None, PopulationLine(trainer, every)

    def summarize(k: int) -> dict:
        return summary(
            plan,
            views[k],
            runs[k],
            every[k],
            first_step,
            stopped_by,
            curriculum,
            ranks,
            k in diverged,
        )

    stop = StopSignals(twice_stops_at_once=not ranks.enabled)
    try:
        with stop:
            while trainer.iteration < trainer.num_iterations and live:
                losses = trainer.iterate()
                # read once: a signal arriving now waits for the next boundary; every rank
                # stops at the same iteration (the largest signal any rank got)
                signum = distributed.agree(stop.signum or 0, ranks, trainer.device) or None
                last = trainer.iteration == trainer.num_iterations or signum is not None
                due = trainer.iteration % config.log.csv_every == 0 or last
                now = time.perf_counter()
                for k in sorted(live):
                    boundary = Boundary(views[k], losses[k], now, last, signum, due)
                    ends = _member_boundary(plan, runs[k], every[k], boundary, echo)
                    if ends is None or (ends and signum is None):  # it ends alone
                        live.discard(k)
                        diverged |= {k} if ends is None else set()
                        ended[k] = summarize(k)
                    elif ends:
                        stopped_by = signum
                if plan.population and line.due(now, config.log.interval_s, last or not live):
                    echo(line.text(live, now))
                if last or stopped_by is not None:
                    break
    except KeyboardInterrupt:  # a second signal mid-iteration: nothing half-done is saved
        echo(f"\nstopped at once: the last checkpoint in {plan.out} is kept as it was")
        raise RunInterrupted(stop.signum or signal.SIGINT) from None
    finally:
        for parts in every:
            for part in parts.parts:
                part.close()
    summaries = [ended[k] if k in ended else summarize(k) for k in range(len(runs))]
    return Outcome(summaries, stopped_by, diverged, [p.episodes.means for p in every])


def _member_boundary(plan: Plan, run: MemberRun, parts, boundary: Boundary, echo):
    """Member's parts at ``boundary``: true where one ends the member, None where its NaN
    guard stopped it (a population's member stops alone; a solo run's error ends the run)."""
    try:
        return any([part.after_iteration(boundary) for part in parts.parts])
    except RunError as exc:
        if not plan.population:
            raise
        echo(f"member {run.member.name} stopped: {exc}")
        return None


@dataclass
class RunParts:
    """The parts of a member at each iteration boundary, in order, and those the loop reads."""

    parts: list
    clock: Clock
    episodes: metrics.Episodes
    stopper: OnRow | None


def _parts(plan: Plan, view: MemberView, run: MemberRun, curriculum, echo, ranks, k: int):
    """Every part of member ``k``, in the order they act at a boundary (see the module
    docstring): a solo run's speak and draw a progress bar, a population's are quiet."""
    config, state = run.config, run.state
    clock, episodes = Clock(state), metrics.Episodes(view, ranks, state)
    planned = view.num_iterations * view.steps_per_iteration
    bar = ranks.main and config.log.progress and sys.stdout.isatty() and not plan.population
    stats = EpisodeStats(episodes, every_iteration=curriculum is not None)
    row = MetricsRow(view, episodes, clock)
    promoter = Promoter(curriculum) if curriculum is not None else None
    world = ranks.world
    identity = checkpoint.identity(config, view.env.num_envs, view.env.obs_shape, world=world)
    interval = config.run.checkpoint_interval
    saver = Checkpointer(view, run.folder, ranks, identity, to_toml(config), interval)
    saver.rank_parts = [promoter, stats] if promoter else []
    saver.run_parts = [row, clock]
    saver.keep, saver.kept_current = plan.population, run.newest
    on_row = plan.on_row_of(k)
    stopper = OnRow(on_row) if on_row is not None else None
    say = _silent if plan.population else echo
    parts = [
        TimeLeft(view, planned),
        *([ProgressBar(view, planned)] if bar else []),
        NanGuard(view, config.run.nan_patience, run.folder),
        stats,
        *([promoter] if promoter else []),
        row,
        *_sinks(config, view, run.folder, state, ranks.main),
        *([stopper] if stopper else []),
        Console(view, config, say, clock, episodes, bar),
        saver,
        Signals(),
    ]
    check_order(parts)
    return RunParts(parts, clock, episodes, stopper)


def _sinks(config: Config, view, out: Path, state, main: bool) -> list:
    """The row's sinks as parts: metrics.csv and the dashboards (rank 0 only)."""
    if not main:
        return []
    csv_sink = dashboards.CsvSink(out / "metrics.csv", view.global_step if state else None)
    try:  # the dashboards get the rows metrics.csv gets
        others = dashboards.open_sinks(config.log, out, cfg.tomllib.loads(to_toml(config)))
    except BaseException:
        csv_sink.close()
        raise
    return [Sink(csv_sink), *(Sink(s) for s in others)]


# ------------------------------------------------------------------------------- the end


def _finish(plan: Plan, trainer, runs: list, outcome: Outcome, echo, ranks) -> dict:
    """Each member's summary.json (and a population's population.json), how the run ended,
    the pictures and the last line; returns the run's summary (a population's)."""
    if ranks.main:
        for run, summary in zip(runs, outcome.summaries, strict=True):
            write_atomic(run.folder / "summary.json", json.dumps(summary, indent=2) + "\n")
    result = outcome.summaries[0]
    if plan.population:
        members = [run.member for run in runs]
        result = population_run.write_population(plan.out, members, outcome.summaries)
    if outcome.stopped_by is not None:
        name = signal.Signals(outcome.stopped_by).name
        whose = "every member's checkpoint" if plan.population else "checkpoint"
        echo(f"\ninterrupted ({name}): {whose} saved at step {trainer.global_step:,} in {plan.out}")
        raise RunInterrupted(outcome.stopped_by)
    if len(outcome.diverged) == len(runs):  # a solo run's guard raised before this
        raise RunError(
            f"every member stopped on non-finite updates; their last good checkpoints are in "
            f"{plan.out}"
        )
    if ranks.main:
        for run in runs:
            pictures(run.config, run.folder, echo)
    echo(
        population_run.done_line(result, plan.out)
        if plan.population
        else _done(trainer, result, outcome.episodes[0])
    )
    return result


def _done(trainer, summary: dict, episode: dict) -> str:
    """A solo run's last line: its steps, speed, episode means and folder."""
    unit = "agent steps" if trainer.env.num_agents > 1 else "steps"
    done = (
        f"done: {summary['global_step']:,} {unit} in {summary['wall_s']:.1f} s "
        f"({summary['sps']:,.0f} {unit.replace('steps', 'SPS')})"
    )
    means = [f"mean return {episode['return']:.2f}", f"mean score {episode['score']:.2f}"]
    return metrics.wrap([done, *means, summary["run_dir"]], " | ")
