"""A training run: its directory, log lines, metrics.csv, checkpoints, signals and resume.

A run never loses a good checkpoint: one process owns the run directory (a lock), every file is
written atomically, SIGINT and SIGTERM stop the run at an iteration boundary with a checkpoint,
and weights that are not finite are never saved. The same seed gives the same metrics.csv
(all columns but time and SPS): rows are written every ``log.csv_every`` iterations.

The loop (``_train``) is one screen: ``trainer.iterate()``, then the run's parts (see
``fasttrain.parts``), in order, at each iteration boundary.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import click

from fasttrain import checkpoint, dashboards, distributed, metrics, savedstate
from fasttrain import config as cfg
from fasttrain.config import Config
from fasttrain.configfile import CONFIG_HEADER, to_toml
from fasttrain.curriculum import Curriculum
from fasttrain.device import resolve_device
from fasttrain.errors import ConfigError, RunError, reason
from fasttrain.kernels.compiling import notices_to
from fasttrain.learners import LEARNERS
from fasttrain.metrics import STAGE_COLUMN  # noqa: F401 - the column's name, for readers
from fasttrain.parts import (
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
from fasttrain.ranks import RankStopped
from fasttrain.rundir import RunLock, check_writable, write_atomic
from fasttrain.startup import EXIT_CODES

REPLAY_FPS = 20  # frames per second of a run's replay.gif


class RunInterrupted(KeyboardInterrupt):
    """The run stopped on SIGINT or SIGTERM after saving; ``exit_code`` is 130 or 143."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.exit_code = EXIT_CODES.get(signum, 130)


class StopSignals:
    """SIGINT and SIGTERM ask the run to stop at the next iteration boundary; a second one
    stops at once (the last checkpoint stays as it was)."""

    def __init__(self, twice_stops_at_once: bool = True):
        self.signum: int | None = None
        self._previous: dict = {}
        # under torchrun a Ctrl-C reaches each rank twice (the terminal's, then torchrun's
        # forwarded one): there only the iteration boundary stops a rank
        self.twice_stops_at_once = twice_stops_at_once

    def _handle(self, signum, frame):
        if self.signum is not None and self.twice_stops_at_once:
            self.signum = signum  # the second one names the exit code
            raise KeyboardInterrupt  # asked twice: give up the iteration in flight
        self.signum = signum

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in EXIT_CODES:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def default_out(config: Config) -> Path:
    """``runs/GAME-ALGO-TIMESTAMP``, with ``-2``, ``-3``... where a run started in the same
    second already holds that name (two runs started at once must not collide)."""
    base = f"{config.game.name}-{config.run.algo}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = Path("runs") / base, 1
    while out.exists():
        n += 1
        out = Path("runs") / f"{base}-{n}"
    return out


def json_safe(value):
    """NaN and inf as null (in nested dicts and lists too), so JSON files stay valid."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value if not isinstance(value, float) or math.isfinite(value) else None


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
        from fasttrain.checkpoint import load_agent

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


def run(config: Config, out=None, resume=None, echo=click.echo, on_row=None) -> dict:
    """Train with ``config`` (any registered learner) into the run directory ``out``, or
    continue the run in ``resume``; returns the run summary.

    ``on_row(row)`` sees every metrics.csv row (a dict) as it is written; when it returns true
    the run ends there as if finished (checkpoint, summary with ``stopped_early``). An exception
    it raises ends the run with the last checkpoint kept (a sweep prunes trials that way).

    Under torchrun every rank calls this; rank 0 alone touches the run directory and prints
    (see ``fasttrain.distributed``).
    """
    device_type = resolve_device(config.run.device).type
    ranks = distributed.setup(config.run.dist_backend, device_type, config.run.dist_timeout_s)
    if not ranks.main:
        echo = _silent
    out = Path(resume if resume is not None else out or default_out(config))
    out = Path(distributed.broadcast_object(str(out), ranks))  # rank 0's name (a timestamp)
    lock = RunLock(out) if ranks.main else None
    try:
        problem = None
        if ranks.main:
            try:
                check_writable(out)
                if out.exists():  # a live run is refused before any work
                    lock.acquire()
            except (ConfigError, RunError) as exc:
                problem = exc
        agree_or_raise(problem, ranks)
        with notices_to(compile_notices(echo)):  # "compiling snake for the cpu backend..."
            return _run(config, out, resume is not None, lock, echo, on_row, ranks)
    finally:
        if lock is not None:
            lock.release()
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


def _first_checks(config: Config, out: Path, resuming: bool, ranks) -> dict | None:
    """Rank 0's checks before any work: the checkpoint to resume (returned), its identity,
    and the extras the run's log settings need."""
    state = checkpoint.load(out) if resuming else None
    if state is not None:
        savedstate.check_common(state, resuming=True)  # counters, clock: before any work
        checkpoint.check_identity(state, config, world=ranks.world)  # fails before compiling
        checkpoint.check_model_size(out, config, state["model"])  # before a network is built
        saved = checkpoint.saved_config(out, state)
        cfg.check_resume(saved, config)  # settings the checkpoint's state cannot follow
        seed = saved.run.seed
        if config.run.seed != seed:  # a resume restores the random streams the seed began
            raise ConfigError(
                f"run.seed = {config.run.seed} on --resume: the run continues the random streams "
                f"of its seed {seed}; leave --seed (and run.seed) out"
            )
        written = out / "config.toml"
        if written.exists():  # a checkpoint copied in from another run does not fit its folder
            try:
                checkpoint.check_identity(
                    state, cfg.from_dict(cfg.load_toml(written), str(written)), world=ranks.world
                )
            except ConfigError as exc:
                raise ConfigError(f"{out}/{checkpoint.FILENAME} is not this run's: {exc}") from None
    if not resuming and (out / checkpoint.FILENAME).exists():
        raise ConfigError(
            f"{out} already holds a run; continue it with --resume {out} or choose another --out"
        )
    dashboards.check(config.log)  # a missing extra fails in one line before compiling
    if config.log.replay:
        from fasttrain import media

        media.check_media()
    return state


def _claim(out: Path, lock) -> None:
    """Create the run directory and take its lock (rank 0), unless taken already."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"cannot create run directory {out}: {reason(exc)}") from None
    if not lock.held:
        lock.acquire()
        if (out / checkpoint.FILENAME).exists():  # another run got here first
            raise ConfigError(f"{out} already holds a run; choose another --out")


def _run(config: Config, out: Path, resuming: bool, lock, echo, on_row, ranks) -> dict:
    # ---- every check and compile happens before any write; rank 0 checks, every rank agrees
    if ranks.enabled and on_row is not None:
        raise ConfigError("on_row needs a single-process run (not under torchrun)")
    state = _on_rank_0(ranks, lambda: _first_checks(config, out, resuming, ranks))
    if resuming and ranks.enabled:  # each rank continues from its own saved state
        state = distributed.scatter_states(
            [state, *state.pop("rank_states", [])] if ranks.main else None, ranks
        )
    trainer = LEARNERS[config.run.algo].trainer(config, warn=echo)
    if state is not None:
        trainer.load_state_dict(state)
        if trainer.iteration >= trainer.num_iterations:
            return _complete(trainer, out, echo, ranks)
    curriculum = None
    if config.curriculum:  # the stage's params are set before the first step
        curriculum = Curriculum(config.curriculum, trainer.env, config.params, trainer.global_step)
        saved = state.get("curriculum") if state is not None else None
        if saved is not None:
            curriculum.load_state_dict(saved)  # a stage this curriculum lacks: one line
        else:
            curriculum.apply()
    _on_rank_0(ranks, lambda: _claim(out, lock))
    echo(settings_line(config, trainer, out, curriculum))
    if ranks.main:
        write_atomic(out / "config.toml", to_toml(config, CONFIG_HEADER))
    result = _train(config, trainer, out, state, curriculum, echo, on_row, ranks)
    if ranks.main:
        write_atomic(out / "summary.json", json.dumps(result.summary, indent=2) + "\n")
    if result.stopped_by is not None:
        name = signal.Signals(result.stopped_by).name
        echo(f"\ninterrupted ({name}): checkpoint saved at step {trainer.global_step:,} in {out}")
        raise RunInterrupted(result.stopped_by)
    if ranks.main:
        pictures(config, out, echo)
    unit = "agent steps" if trainer.env.num_agents > 1 else "steps"
    episode, summary = result.episode, result.summary
    done = (
        f"done: {summary['global_step']:,} {unit} in {summary['wall_s']:.1f} s "
        f"({summary['sps']:,.0f} {unit.replace('steps', 'SPS')})"
    )
    means = [f"mean return {episode['return']:.2f}", f"mean score {episode['score']:.2f}"]
    echo(metrics.wrap([done, *means, str(out)], " | "))
    return summary


@dataclass
class Outcome:
    """How the loop ended: the summary, the signal that stopped it (None: it finished) and
    the episode means of its last row."""

    summary: dict
    stopped_by: int | None
    episode: dict


def _complete(trainer, out: Path, echo, ranks) -> dict:
    """A resumed run that has nothing left to do says so and writes nothing."""
    echo(
        f"{out} is complete: {trainer.global_step:,} steps of total_timesteps "
        f"{trainer.args.total_timesteps:,}; nothing to do (pass --steps with a larger total "
        "to continue)"
    )
    summary_path = out / "summary.json"
    if not ranks.main:
        return {}
    return json.loads(summary_path.read_text()) if summary_path.exists() else {}


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
    if curriculum is not None:
        pieces.append(f"curriculum stage {curriculum.stage + 1}/{curriculum.num_stages}")
    pieces.append(f"run dir {out}")
    text = metrics.wrap(pieces, " | ")
    overrides = config.overrides()
    if overrides:
        text += "\n" + metrics.wrap([f"settings: {overrides[0]}", *overrides[1:]], ", ")
    return text


def _train(config: Config, trainer, out: Path, state, curriculum, echo, on_row, ranks) -> Outcome:
    """The loop: an iteration, then every part at its boundary."""
    run = _parts(config, trainer, out, state, curriculum, echo, on_row, ranks)
    first_step, stopped_by = trainer.global_step, None
    stop = StopSignals(twice_stops_at_once=not ranks.enabled)
    try:
        with stop:
            while trainer.iteration < trainer.num_iterations:
                losses = trainer.iterate()
                # read once: a signal arriving now waits for the next boundary; every rank
                # stops at the same iteration (the largest signal any rank got)
                signum = distributed.agree(stop.signum or 0, ranks, trainer.device) or None
                last = trainer.iteration == trainer.num_iterations or signum is not None
                due = trainer.iteration % config.log.csv_every == 0 or last
                boundary = Boundary(trainer, losses, time.perf_counter(), last, signum, due)
                ends = [part.after_iteration(boundary) for part in run.parts]
                if any(ends):
                    stopped_by = signum
                    break
    except KeyboardInterrupt:  # a second signal mid-iteration: nothing half-done is saved
        echo(f"\nstopped at once: the last checkpoint in {out} is kept as it was")
        raise RunInterrupted(stop.signum or signal.SIGINT) from None
    finally:
        for part in run.parts:
            part.close()
    summary = _summary(config, trainer, out, run, first_step, stopped_by, curriculum, ranks)
    return Outcome(summary, stopped_by, run.episodes.means)


@dataclass
class RunParts:
    """The parts of a run at each iteration boundary, in order, and those the loop reads."""

    parts: list
    clock: Clock
    episodes: metrics.Episodes
    stopper: OnRow | None


def _parts(config: Config, trainer, out: Path, state, curriculum, echo, on_row, ranks):
    """Every part of the run, in the order they act at a boundary (see the module docstring)."""
    clock, episodes = Clock(state), metrics.Episodes(trainer, ranks, state)
    planned = trainer.num_iterations * trainer.steps_per_iteration
    bar = ranks.main and config.log.progress and sys.stdout.isatty()
    stats = EpisodeStats(episodes, every_iteration=curriculum is not None)
    row = MetricsRow(trainer, episodes, clock)
    promoter = Promoter(curriculum) if curriculum is not None else None
    identity = checkpoint.identity(
        config, trainer.env.num_envs, trainer.env.obs_shape, world=ranks.world
    )
    saver = Checkpointer(
        trainer, out, ranks, identity, to_toml(config), config.run.checkpoint_interval
    )
    saver.rank_parts = [promoter, stats] if promoter else []
    saver.run_parts = [row, clock]
    stopper = OnRow(on_row) if on_row is not None else None
    parts = [
        TimeLeft(trainer, planned),
        *([ProgressBar(trainer, planned)] if bar else []),
        NanGuard(trainer, config.run.nan_patience, out),
        stats,
        *([promoter] if promoter else []),
        row,
        *_sinks(config, trainer, out, state, ranks.main),
        *([stopper] if stopper else []),
        Console(trainer, config, echo, clock, episodes, bar),
        saver,
        Signals(),
    ]
    check_order(parts)
    return RunParts(parts, clock, episodes, stopper)


def _summary(config, trainer, out, run: RunParts, first_step, stopped_by, curriculum, ranks):
    """``summary.json``: the run's steps, speed, last episode means and how it ended."""
    elapsed = time.perf_counter() - run.clock.start
    means = run.episodes.means
    summary = {
        "game": config.game.name,
        "algo": config.run.algo,
        "global_step": trainer.global_step,
        "wall_s": round(elapsed, 2),
        "sps": round((trainer.global_step - first_step) / elapsed, 1),
        "episodic_return": json_safe(means["return"]),
        "episodic_length": json_safe(means["length"]),
        "score": json_safe(means["score"]),
        "precision": trainer.precision,
        "interrupted": stopped_by is not None,
        "stopped_early": bool(run.stopper and run.stopper.stopped_early),
        "run_dir": str(out),
    }
    if curriculum is not None:
        summary["curriculum_stage"] = curriculum.stage + 1
        summary["curriculum_stages"] = curriculum.num_stages
    if ranks.enabled:  # the ranks, and rank 0's seconds in the gradient all-reduce
        summary["world_size"] = ranks.world
        summary["allreduce_s"] = round(trainer.ctx.comm_s, 3)
    return summary


def _sinks(config: Config, trainer, out: Path, state, main: bool) -> list:
    """The row's sinks as parts: metrics.csv and the dashboards (rank 0 only)."""
    if not main:
        return []
    csv_sink = dashboards.CsvSink(out / "metrics.csv", trainer.global_step if state else None)
    try:  # the dashboards get the rows metrics.csv gets
        others = dashboards.open_sinks(config.log, out, cfg.tomllib.loads(to_toml(config)))
    except BaseException:
        csv_sink.close()
        raise
    return [Sink(csv_sink), *(Sink(s) for s in others)]
