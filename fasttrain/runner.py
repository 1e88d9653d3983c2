"""A training run: its directory, log lines, metrics.csv, checkpoints, signals and resume.

A run never loses a good checkpoint: one process owns the run directory (a lock), every file is
written atomically, SIGINT and SIGTERM stop the run at an iteration boundary with a checkpoint,
and weights that are not finite are never saved. The same seed gives the same metrics.csv
(all columns but time and SPS): rows are written every ``log.csv_every`` iterations.

With a curriculum (``[[curriculum.stage]]``) the episode stats are read after every iteration
and feed both the promotion rule and the next metrics row; a promotion changes the game's params
between iterations, and the checkpoint carries the stage so a resumed run continues bit for bit.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import signal
import sys
import threading
import time
from pathlib import Path

import click

from fasttrain import checkpoint, dashboards, distributed
from fasttrain import config as cfg
from fasttrain.config import CONFIG_HEADER, Config, to_toml
from fasttrain.curriculum import Curriculum
from fasttrain.device import resolve_device
from fasttrain.errors import ConfigError, RunError, reason
from fasttrain.learners import LEARNERS
from fasttrain.rundir import RunLock, check_regular, check_writable, open_text, write_atomic

# The columns of a PPO run's metrics.csv; other learners put their own losses/... in the middle.
METRICS = (
    "global_step",
    "time_s",
    "sps",
    "charts/episodic_return",
    "charts/episodic_length",
    "charts/score",
    "charts/learning_rate",
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/clipfrac",
    "losses/skipped_updates",
    "time/env",
    "time/forward",
    "time/learn",
    "time/other",
)
# Short names of loss columns in the log line; other keys print their last path component.
SHORT = {
    "losses/policy_loss": "pg",
    "losses/value_loss": "v",
    "losses/entropy": "ent",
    "losses/approx_kl": "kl",
    "losses/clipfrac": "clip",
    "losses/td_loss": "td",
    "losses/q_values": "q",
    "charts/epsilon": "eps",
    "losses/skipped_updates": "skipped",
}
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number
NO_EPISODE = {"return": math.nan, "length": math.nan, "score": math.nan}
REPLAY_FPS = 20  # frames per second of a run's replay.gif
STAGE_COLUMN = "curriculum/stage"  # 1-based stage the row's last iteration played in


def combine(batches: list[dict]) -> dict:
    """Episode means over ``env.stats()`` batches, weighted by their episode counts (one batch
    as it is, so a row of one batch is exactly what the env reported)."""
    if len(batches) == 1:
        return {k: batches[0][k] for k in NO_EPISODE}
    count = sum(b["episodes"] for b in batches)
    return {k: sum(b[k] * b["episodes"] for b in batches) / count for k in NO_EPISODE}


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
    return Path("runs") / f"{config.game.name}-{config.run.algo}-{time.strftime('%Y%m%d-%H%M%S')}"


def json_safe(value):
    """NaN and inf as null (in nested dicts and lists too), so JSON files stay valid."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value if not isinstance(value, float) or math.isfinite(value) else None


def duration(seconds: float) -> str:
    """``seconds`` as ``1h02m``, ``3m07s`` or ``42s``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def eta(trainer, planned: int, first_step: int, start: float, now: float) -> str:
    """``"ETA 3m07s | "``: the time the run's remaining steps take at its mean speed since
    this process started (empty before a step, and at the end)."""
    done, left = trainer.global_step - first_step, planned - trainer.global_step
    if done <= 0 or left <= 0 or now <= start:
        return ""
    return f"ETA {duration(left * (now - start) / done)} | "


def trim_metrics(path: Path, global_step: int) -> list[str] | None:
    """Drop rows of ``path`` past ``global_step`` (a resume repeats them) and a last row cut
    short (a full disk or a kill mid-write); returns the header."""
    if not check_regular(path, "read"):
        return None
    text = path.read_text()
    complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
    rows = list(csv.reader(io.StringIO(complete)))
    if not rows:
        return None
    header, body = rows[0], rows[1:]
    kept = [row for row in body if len(row) == len(header) and int(float(row[0])) <= global_step]
    if len(kept) != len(body) or complete != text:
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([header, *kept])
        write_atomic(path, out.getvalue())
    return header


def pictures(config: Config, trainer, out: Path, echo) -> None:
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
        return _run(config, out, resume is not None, lock, echo, on_row, ranks)
    finally:
        if lock is not None:
            lock.release()
        distributed.shutdown()


def _silent(*args, **kwargs) -> None:
    """The echo of ranks other than 0: rank 0 speaks for the run."""


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
        raise distributed.RankStopped(verdict)


def _first_checks(config: Config, out: Path, resuming: bool, ranks) -> dict | None:
    """Rank 0's checks before any work: the checkpoint to resume (returned), its identity,
    and the extras the run's log settings need."""
    state = checkpoint.load(out) if resuming else None
    if state is not None:
        checkpoint.check_identity(state, config, world=ranks.world)  # fails before compiling
        seed = checkpoint.saved_config(out, state).run.seed
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


def _run(config: Config, out: Path, resuming: bool, lock, echo, on_row, ranks) -> dict:
    # ---- every check and compile happens before any write; rank 0 checks, every rank agrees
    main = ranks.main
    if ranks.enabled and on_row is not None:
        raise ConfigError("on_row needs a single-process run (not under torchrun)")
    state, problem = None, None
    if main:
        try:
            state = _first_checks(config, out, resuming, ranks)
        except (ConfigError, RunError) as exc:
            problem = exc
    agree_or_raise(problem, ranks)
    if resuming and ranks.enabled:  # each rank continues from its own saved state
        states = None
        if main:
            rest = state.pop("rank_states", [])
            states = [state, *rest]
        state = distributed.scatter_states(states, ranks)
    trainer = LEARNERS[config.run.algo].trainer(config, warn=echo)
    identity = checkpoint.identity(
        config, trainer.env.num_envs, trainer.env.obs_shape, world=ranks.world
    )
    if state is not None:
        trainer.load_state_dict(state)
        if trainer.iteration >= trainer.num_iterations:
            echo(
                f"{out} is complete: {trainer.global_step:,} steps of "
                f"total_timesteps {trainer.args.total_timesteps:,}; nothing to do (pass "
                "--steps with a larger total to continue)"
            )
            summary_path = out / "summary.json"
            if not main:
                return {}
            return json.loads(summary_path.read_text()) if summary_path.exists() else {}
    curriculum = None
    if config.curriculum:  # the stage's params are set before the first step
        curriculum = Curriculum(
            config.curriculum, trainer.env, config.game_params(), trainer.global_step
        )
        saved = state.get("curriculum") if state is not None else None
        if saved is not None:
            curriculum.load_state_dict(saved)  # a stage this curriculum lacks: one line
        else:
            curriculum.apply()
    problem = None
    if main:
        try:
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise RunError(f"cannot create run directory {out}: {reason(exc)}") from None
            if not lock.held:
                lock.acquire()
                if (out / checkpoint.FILENAME).exists():  # another run got here first
                    raise ConfigError(f"{out} already holds a run; choose another --out")
        except ConfigError as exc:
            problem = exc
    agree_or_raise(problem, ranks)

    args = trainer.args
    planned = trainer.num_iterations * trainer.steps_per_iteration
    rounded = (
        ""
        if planned == args.total_timesteps
        else (
            f" (total_timesteps {args.total_timesteps:,} rounded to {trainer.num_iterations:,} "
            f"iterations of {trainer.steps_per_iteration:,})"
        )
    )
    overrides = config.overrides()
    # with several agents per environment, steps and SPS count agent steps (learner rows)
    agents = trainer.env.num_agents > 1
    unit, sps_unit = ("agent steps", "agent SPS") if agents else ("steps", "SPS")
    stage_text = ""
    if config.run.action_repeat > 1:  # steps stay learner steps: say what one is
        k = config.run.action_repeat
        stage_text += f" (action repeat {k}: each step plays up to {k} game steps)"
    if curriculum is not None:
        stage_text += f" | curriculum stage {curriculum.stage + 1}/{curriculum.num_stages}"
    echo(
        f"fasttrain: {config.game.name} {config.run.algo} on {trainer.device} | "
        f"{trainer.describe()} | {planned:,} {unit}{rounded}{stage_text} | run dir {out}"
        + (f" | settings: {', '.join(overrides)}" if overrides else "")
    )
    # ---- metrics.csv: rows at iteration boundaries, none past the checkpoint (rank 0)
    metrics_path = out / "metrics.csv"
    columns, metrics_file, sinks = None, None, []
    if main:
        write_atomic(out / "config.toml", to_toml(config, CONFIG_HEADER))
        columns = trim_metrics(metrics_path, trainer.global_step) if resuming else None
        metrics_file = open_text(metrics_path, append=bool(columns))
        try:  # the dashboards get the rows metrics.csv gets
            sinks = dashboards.open_sinks(config.log, out, cfg.tomllib.loads(to_toml(config)))
        except BaseException:
            metrics_file.close()
            raise
    writer = None  # made at the first row: its columns follow the learner's losses
    time_offset = state.get("time_s", 0.0) if state else 0.0
    episode = dict(state.get("episode", NO_EPISODE)) if state else dict(NO_EPISODE)
    # env.stats() batches read since the last row (every iteration with a curriculum)
    batches = list(state.get("episode_batches", [])) if state else []
    start = time.perf_counter()
    first_step = trainer.global_step
    row_time, row_step = start, trainer.global_step
    echo_time, echo_step = start, trainer.global_step
    consecutive_skips, skip_updates = 0, trainer.ctx.updates
    show_bar = main and config.log.progress and sys.stdout.isatty()
    bar = None
    if show_bar:  # click's ETA times the steps this process takes: a resume counts from its step
        left = planned - trainer.global_step
        label = "training" if not first_step else f"training from step {first_step:,}"
        bar = click.progressbar(length=left, label=label, show_eta=True)

    def save():
        payload = trainer.state_dict()
        if curriculum is not None:
            payload["curriculum"] = curriculum.state_dict()
            payload["episode_batches"] = [dict(b) for b in batches]
        states = distributed.gather_states(payload, ranks)  # every rank's, on rank 0
        if not main:
            return
        if any(checkpoint.nonfinite_weight(s) for s in states):  # never overwrite a good checkpoint
            raise RunError(
                f"weights are not finite at step {trainer.global_step:,}; the last "
                f"good checkpoint in {out} is kept"
            )
        payload = states[0]
        if ranks.enabled:  # the other ranks' states (environments, streams), for a resume
            payload = {**payload, "rank_states": states[1:]}
        checkpoint.save(
            out / checkpoint.FILENAME,
            {
                **payload,
                "identity": identity,
                "config": to_toml(config),
                "episode": episode,
                "time_s": time_offset + time.perf_counter() - start,
            },
        )

    stopped_by = None
    stopped_early = False
    stop = StopSignals(twice_stops_at_once=not ranks.enabled)
    try:
        with stop:
            while trainer.iteration < trainer.num_iterations:
                step_before = trainer.global_step
                losses = trainer.iterate()
                now = time.perf_counter()
                # read once: a signal arriving now waits for the next boundary; every rank
                # stops at the same iteration (the largest signal any rank got)
                signum = distributed.agree(stop.signum or 0, ranks, trainer.device) or None
                last = trainer.iteration == trainer.num_iterations or signum is not None
                if bar is not None:
                    bar.update(trainer.global_step - step_before)

                # ---- the NaN/inf guard: skipped updates in a row
                skipped = int(losses.get("losses/skipped_updates", 0))
                updates, skip_updates = trainer.ctx.updates - skip_updates, trainer.ctx.updates
                if skipped == 0:
                    consecutive_skips = 0
                elif skipped >= updates:
                    consecutive_skips += skipped
                else:
                    consecutive_skips = skipped  # the last ones, at least
                if consecutive_skips >= config.run.nan_patience:
                    bad = [k for k, v in losses.items() if not math.isfinite(v)]
                    what = ", ".join(bad) if bad else "gradients"
                    raise RunError(
                        f"stopped at step {trainer.global_step:,}: {consecutive_skips} updates in "
                        f"a row were skipped for a non-finite {what} (check rewards and settings); "
                        + (
                            f"the last good checkpoint in {out} is kept"
                            if (out / checkpoint.FILENAME).exists()
                            else "no checkpoint was written"
                        )
                    )

                # ---- CURRICULUM: episode stats after every iteration; promotion between them
                row_due = trainer.iteration % config.log.csv_every == 0 or last
                if curriculum is not None or row_due:
                    # clears the env's sums; over every rank's episodes
                    stats = distributed.episode_stats(trainer.env.stats(), ranks, trainer.device)
                    if stats:
                        batches.append(stats)
                promotion = None
                if curriculum is not None:
                    stage = curriculum.stage  # the one this iteration played in
                    promotion = curriculum.update(stats, trainer.global_step)

                # ---- LOG: a metrics.csv row every csv_every iterations, a line every interval_s
                if row_due:
                    if batches:
                        episode = combine(batches)
                        batches.clear()
                    split = trainer.timers.split()
                    trainer.timers.reset()
                    row = {
                        "global_step": trainer.global_step,
                        "time_s": round(time_offset + now - start, 3),
                        "sps": round((trainer.global_step - row_step) / (now - row_time), 1),
                        "charts/episodic_return": episode["return"],
                        "charts/episodic_length": episode["length"],
                        "charts/score": episode["score"],
                        "charts/learning_rate": trainer.learning_rate,
                        **({} if curriculum is None else {STAGE_COLUMN: stage + 1}),
                        **losses,
                        **{f"time/{k}": round(v, 4) for k, v in split.items()},
                    }
                    if writer is None and main:
                        writer = csv.DictWriter(
                            metrics_file, fieldnames=columns or list(row), extrasaction="ignore"
                        )
                        if columns is None:
                            writer.writeheader()
                    try:
                        if main:
                            writer.writerow(row)
                            metrics_file.flush()
                        for sink in sinks:
                            sink.write(row)
                    except OSError as exc:  # a full disk: say so, keep the last checkpoint
                        raise RunError(
                            f"{exc.strerror.lower()} writing {metrics_path}; the last "
                            f"checkpoint in {out} is intact"
                        ) from None
                    row_time, row_step = now, trainer.global_step
                    if on_row is not None and on_row(row):
                        stopped_early = last = True
                if now - echo_time >= config.log.interval_s or last:
                    sps = (trainer.global_step - echo_step) / (now - echo_time)
                    if not row_due:  # the time split so far since the last row
                        split = trainer.timers.split()
                    at = (
                        ""
                        if curriculum is None
                        else f"stage {stage + 1}/{curriculum.num_stages} | "
                    )
                    echo(
                        f"{'' if bar is None else chr(10)}step {trainer.global_step:>11,} | "
                        f"{sps:>9,.0f} {sps_unit} | {eta(trainer, planned, first_step, start, now)}"
                        f"{at}return {episode['return']:7.2f} | "
                        f"score {episode['score']:6.2f} | len {episode['length']:6.1f} | "
                        + " ".join(
                            f"{SHORT.get(k, k.split('/')[-1])} {v:.4g}" for k, v in losses.items()
                        )
                        + " | "
                        + " ".join(f"{k} {v:.0%}" for k, v in split.items())
                    )
                    echo_time, echo_step = now, trainer.global_step
                if promotion is not None:
                    echo(str(promotion))
                if trainer.iteration % config.run.checkpoint_interval == 0 or last:
                    save()
                if signum is not None:
                    stopped_by = signum
                    break
                if stopped_early:
                    break
    except KeyboardInterrupt:  # a second signal mid-iteration: nothing half-done is saved
        stopped_by = stop.signum or signal.SIGINT
        echo(f"\nstopped at once: the last checkpoint in {out} is kept as it was")
        raise RunInterrupted(stopped_by) from None
    finally:
        with contextlib.suppress(OSError):  # rows that could not be written were reported
            if metrics_file is not None:
                metrics_file.close()
        dashboards.close_sinks(sinks)
        if bar is not None:
            bar.render_finish()

    elapsed = time.perf_counter() - start
    summary = {
        "game": config.game.name,
        "algo": config.run.algo,
        "global_step": trainer.global_step,
        "wall_s": round(elapsed, 2),
        "sps": round((trainer.global_step - first_step) / elapsed, 1),
        "episodic_return": json_safe(episode["return"]),
        "episodic_length": json_safe(episode["length"]),
        "score": json_safe(episode["score"]),
        "precision": trainer.precision,
        "interrupted": stopped_by is not None,
        "stopped_early": stopped_early,
        "run_dir": str(out),
    }
    if curriculum is not None:
        summary["curriculum_stage"] = curriculum.stage + 1
        summary["curriculum_stages"] = curriculum.num_stages
    if ranks.enabled:  # the ranks, and rank 0's seconds in the gradient all-reduce
        summary["world_size"] = ranks.world
        summary["allreduce_s"] = round(trainer.ctx.comm_s, 3)
    if main:
        write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    if stopped_by is not None:
        name = signal.Signals(stopped_by).name
        echo(f"\ninterrupted ({name}): checkpoint saved at step {trainer.global_step:,} in {out}")
        raise RunInterrupted(stopped_by)
    if main:
        pictures(config, trainer, out, echo)
    echo(
        f"done: {summary['global_step']:,} {unit} in {elapsed:.1f} s "
        f"({summary['sps']:,.0f} {sps_unit}) | "
        f"mean return {episode['return']:.2f} | mean score {episode['score']:.2f} | {out}"
    )
    return summary
