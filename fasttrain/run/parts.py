"""The parts of a run: small objects the runner's loop hands each iteration boundary to.

A part derives from ``Part`` and overrides only the hooks it uses (as Stable-Baselines3's
``BaseCallback`` and Lightning's ``Callback``): ``after_iteration(boundary)`` (true: end the run
after this boundary), ``state_dict()`` (what it adds to a checkpoint, when the ``Checkpointer``
is given it) and ``close()`` (at the run's end, however it ended). Parts talk to each other
only through the ``Boundary``: a part names the fields it ``writes`` and ``reads``, and
``check_order`` refuses an order where a part reads a field that a later part writes.

The runner's order (``fasttrain.run.runner``): the time left, the progress bar, the NaN guard, the
episode statistics, the curriculum, the metrics row, its sinks (metrics.csv, dashboards,
``on_row``), the console line, the checkpointer and the stop signals.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from fasttrain.config.curriculum import Curriculum
from fasttrain.config.resolve import Config
from fasttrain.errors import RunError
from fasttrain.learners import LEARNERS, distributed
from fasttrain.run import checkpoint, metrics
from fasttrain.run.rundir import keep_previous


@dataclass
class Boundary:
    """One iteration boundary, as the parts see it, in their order.

    The loop fills the first six fields. The others start empty and are written by one part
    for the parts after it (``Part.writes`` / ``Part.reads``; ``check_order`` keeps the order):

    - ``eta``: ``TimeLeft`` -> ``ProgressBar``, ``Console``
    - ``stats``: ``EpisodeStats`` -> ``Promoter``
    - ``stage``, ``notes``: ``Promoter`` -> ``MetricsRow`` (stage), ``Console``
    - ``row``, ``split``: ``MetricsRow`` -> the sinks, ``OnRow``, ``Console`` (split)
    - ``last``: the loop, then ``OnRow`` (it ends the run there) -> ``Console``, ``Checkpointer``
    """

    trainer: object
    losses: dict
    now: float  # perf_counter at the boundary
    last: bool  # the run ends here (its last iteration, a stop signal, on_row)
    signum: int | None  # the stop signal every rank agreed on, if any
    row_due: bool  # a metrics row is written at this boundary
    stats: dict = field(default_factory=dict)  # this iteration's episode stats, when read
    stage: int | None = None  # the curriculum stage this iteration played in
    row: dict | None = None  # the metrics row, when due
    split: dict | None = None  # where the time went since the last row
    eta: str = "--"  # the time left, as the log line shows it
    notes: list = field(default_factory=list)  # lines to print after the console line


class Part:
    """A part of a run; every hook does nothing until a part overrides it."""

    reads: tuple[str, ...] = ()  # the Boundary fields it reads that an earlier part writes
    writes: tuple[str, ...] = ()  # the Boundary fields it writes for the parts after it

    def after_iteration(self, boundary: Boundary) -> bool:
        """Act at an iteration boundary; true ends the run after this boundary."""
        return False

    def state_dict(self) -> dict:
        """What this part adds to a checkpoint."""
        return {}

    def close(self) -> None:
        """Let go of what the part holds (files, a progress bar), once, at the run's end."""


def check_order(parts: list[Part]) -> None:
    """Refuse an order where a part reads a Boundary field that a later part writes."""
    for i, reader in enumerate(parts):
        for writer in parts[i + 1 :]:
            late = sorted(set(reader.reads) & set(writer.writes))
            if late:
                raise ValueError(
                    f"{type(reader).__name__} reads {', '.join(late)} before "
                    f"{type(writer).__name__} writes it"
                )


class Clock:
    """Training seconds: since this process's first iteration, plus those of the run before a
    resume (``time_s`` in the checkpoint)."""

    def __init__(self, state: dict | None):
        self.start = time.perf_counter()
        self.offset = state.get("time_s", 0.0) if state else 0.0

    def time_s(self, now: float | None = None) -> float:
        return self.offset + (now if now is not None else time.perf_counter()) - self.start

    def state_dict(self) -> dict:
        return {"time_s": self.time_s()}


class TimeLeft(Part):
    """The time left at the speed since this process's first iteration boundary: the first
    iteration holds the compiles (torch.compile, the learner's kernels on a cold cache), which
    at the speed since the start would read hours for a run of minutes. It reads ``--`` until
    a second boundary has measured the speed."""

    writes = ("eta",)

    def __init__(self, trainer, planned: int):
        self.trainer, self.planned = trainer, planned
        self.origin: tuple[int, float] | None = None  # (global_step, time) at the first boundary

    def after_iteration(self, boundary: Boundary) -> bool:
        step = self.trainer.global_step
        if self.origin is None:
            self.origin = (step, boundary.now)
        done, seconds = step - self.origin[0], boundary.now - self.origin[1]
        boundary.eta = metrics.time_left(self.planned - step, done, seconds)
        return False


class ProgressBar(Part):
    """click's progress bar over the steps this process takes (stdout a terminal only), with
    the time left of ``TimeLeft`` (click's own estimate would count the compiles)."""

    reads = ("eta",)

    def __init__(self, trainer, planned: int):
        self.trainer, self.step = trainer, trainer.global_step
        label = "training" if not self.step else f"training from step {self.step:,}"
        self.bar = click.progressbar(
            length=planned - self.step,
            label=label,
            show_eta=False,
            item_show_func=lambda eta: None if eta is None else f"ETA {eta}",
        )

    def after_iteration(self, boundary: Boundary) -> bool:
        self.bar.update(self.trainer.global_step - self.step, current_item=boundary.eta)
        self.step = self.trainer.global_step
        return False

    def close(self) -> None:
        self.bar.render_finish()


class NanGuard(Part):
    """Stops the run in one line after ``patience`` optimizer updates in a row were skipped
    for a non-finite loss or gradient (the learners skip each one; this counts them)."""

    def __init__(self, trainer, patience: int, out: Path):
        self.trainer, self.patience, self.out = trainer, patience, out
        self.in_a_row, self.updates = 0, trainer.ctx.updates

    def after_iteration(self, boundary: Boundary) -> bool:
        skipped = int(boundary.losses.get("losses/skipped_updates", 0))
        updates, self.updates = self.trainer.ctx.updates - self.updates, self.trainer.ctx.updates
        if skipped == 0:
            self.in_a_row = 0
        elif skipped >= updates:
            self.in_a_row += skipped
        else:
            self.in_a_row = skipped  # the last ones, at least
        if self.in_a_row < self.patience:
            return False
        bad = [k for k, v in boundary.losses.items() if not math.isfinite(v)]
        kept = (
            f"the last good checkpoint in {self.out} is kept"
            if (self.out / checkpoint.FILENAME).exists()
            else "no checkpoint was written"
        )
        raise RunError(
            f"stopped at step {self.trainer.global_step:,}: {self.in_a_row} updates in a row "
            f"were skipped for a non-finite {', '.join(bad) if bad else 'gradients'} (check "
            f"rewards and settings); {kept}"
        )


class EpisodeStats(Part):
    """Reads the episode statistics when a row is due, or after every iteration where
    ``every_iteration`` (a curriculum promotes on them)."""

    writes = ("stats",)

    def __init__(self, episodes: metrics.Episodes, every_iteration: bool):
        self.episodes, self.every_iteration = episodes, every_iteration

    def after_iteration(self, boundary: Boundary) -> bool:
        if boundary.row_due or self.every_iteration:
            boundary.stats = self.episodes.read()
        return False

    def state_dict(self) -> dict:  # the batches read since the last row, with a curriculum
        return {"episode_batches": [dict(b) for b in self.episodes.batches]}


class Promoter(Part):
    """The curriculum as a part of a run: after each iteration it
    records the stage the iteration played in, feeds it the iteration's episode stats and notes
    a promotion for the console; its state goes into every checkpoint."""

    reads = ("stats",)
    writes = ("stage", "notes")

    def __init__(self, curriculum: Curriculum):
        self.curriculum = curriculum

    def after_iteration(self, boundary) -> bool:
        boundary.stage = self.curriculum.stage  # the one this iteration played in
        promotion = self.curriculum.update(boundary.stats, boundary.trainer.global_step)
        if promotion is not None:
            boundary.notes.append(str(promotion))
        return False

    def state_dict(self) -> dict:
        return {"curriculum": self.curriculum.state_dict()}


class MetricsRow(Part):
    """Builds the metrics row when one is due (see ``fasttrain.run.metrics.row``)."""

    reads = ("stage",)
    writes = ("row", "split")

    def __init__(self, trainer, episodes: metrics.Episodes, clock: Clock):
        self.trainer, self.episodes, self.clock = trainer, episodes, clock
        self.time, self.step = clock.start, trainer.global_step

    def after_iteration(self, boundary: Boundary) -> bool:
        if not boundary.row_due:
            return False
        trainer, now = self.trainer, boundary.now
        boundary.split = trainer.timers.split()
        trainer.timers.reset()
        sps = (trainer.global_step - self.step) / (now - self.time)
        boundary.row = metrics.row(
            trainer,
            self.clock.time_s(now),
            sps,
            self.episodes.take(),
            boundary.losses,
            boundary.split,
            boundary.stage,
        )
        self.time, self.step = now, trainer.global_step
        return False

    def state_dict(self) -> dict:  # the means the last row showed, for the next one
        return {"episode": self.episodes.means}


class Sink(Part):
    """Hands each row to a sink (``metrics.csv``, a dashboard)."""

    reads = ("row",)

    def __init__(self, sink):
        self.sink = sink

    def after_iteration(self, boundary: Boundary) -> bool:
        if boundary.row is not None:
            self.sink.write(boundary.row)
        return False

    def close(self) -> None:
        self.sink.close()


class OnRow(Part):
    """``on_row(row)`` of ``run``: a true answer ends the run there, as if it had finished."""

    reads = ("row",)
    writes = ("last",)

    def __init__(self, on_row):
        self.on_row, self.stopped_early = on_row, False

    def after_iteration(self, boundary: Boundary) -> bool:
        if boundary.row is not None and self.on_row(boundary.row):
            self.stopped_early = boundary.last = True
        return self.stopped_early


class Console(Part):
    """The log line, every ``log.interval_s`` seconds and at the last boundary, then the notes
    of the boundary (a promotion). It fits 120 columns; ``log.wide`` prints every loss and
    where the time went."""

    reads = ("eta", "stage", "split", "notes", "last")

    def __init__(self, trainer, config: Config, echo, clock: Clock, episodes, bar):
        self.trainer, self.echo, self.clock = trainer, echo, clock
        self.episodes = episodes
        self.interval, self.bar, self.wide = config.log.interval_s, bar, config.log.wide
        self.stages = len(config.curriculum)
        self.unit = "agent SPS" if trainer.env.num_agents > 1 else "SPS"
        self.short = LEARNERS[config.run.algo].short_names
        self.time, self.step = clock.start, trainer.global_step

    def after_iteration(self, boundary: Boundary) -> bool:
        trainer, now = self.trainer, boundary.now
        if now - self.time >= self.interval or boundary.last:
            sps = (trainer.global_step - self.step) / (now - self.time)
            split = boundary.split or trainer.timers.split()  # since the last row
            at = "" if boundary.stage is None else f"stage {boundary.stage + 1}/{self.stages} | "
            line = metrics.console_line(
                trainer.global_step,
                sps,
                self.unit,
                boundary.eta,
                at,
                self.episodes.means,
                boundary.losses,
                split,
                self.short,
                self.wide,
            )
            self.echo(("\n" if self.bar else "") + line)
            self.time, self.step = now, trainer.global_step
        for note in boundary.notes:
            self.echo(note)
        return False


class Checkpointer(Part):
    """Writes a run's checkpoint every ``interval`` iterations and at its last one.

    The payload is the trainer's state plus what ``rank_parts`` add (``state_dict()`` of each,
    e.g. the curriculum), gathered from every rank to rank 0, which adds what ``run_parts`` add
    (the episode means, the clock) and writes it with the run's identity and config. A state
    with any network that is not finite is refused, so a good checkpoint is never overwritten.
    """

    reads = ("last",)

    def __init__(self, trainer, out: Path, ranks, identity: dict, config_text: str, interval):
        self.trainer, self.out, self.ranks, self.interval = trainer, Path(out), ranks, interval
        self.identity, self.config_text = identity, config_text
        self.rank_parts: list = []  # every rank's: their state goes into each rank's payload
        self.run_parts: list = []  # rank 0's: their state goes into the file once
        self.keep, self.kept_current = False, True

    def after_iteration(self, boundary) -> bool:
        if boundary.last or self.trainer.iteration % self.interval == 0:
            self.save()
        return False

    def save(self) -> None:
        payload = self.trainer.state_dict()
        for part in self.rank_parts:
            payload.update(part.state_dict())
        states = distributed.gather_states(payload, self.ranks)  # every rank's, on rank 0
        if not self.ranks.main:
            return
        faults = [f for f in map(checkpoint.weight_fault, states) if f is not None]
        if faults:  # never overwrite a good checkpoint with one no reader would take
            raise RunError(
                f"weights are {faults[0][1]} at step {self.trainer.global_step:,}; the last "
                f"good checkpoint in {self.out} is kept"
            )
        payload = states[0]
        if self.ranks.enabled:  # the other ranks' states (environments, streams), for a resume
            payload = {**payload, "rank_states": states[1:]}
        payload = {**payload, "identity": self.identity, "config": self.config_text}
        for part in self.run_parts:
            payload.update(part.state_dict())
        path = self.out / checkpoint.FILENAME
        if self.keep and self.kept_current:
            keep_previous(path, self.out / checkpoint.PREVIOUS)
        checkpoint.save(path, payload)
        self.kept_current = True


class Signals(Part):
    """Ends the run at a boundary where a stop signal was agreed on (see ``StopSignals``)."""

    def after_iteration(self, boundary: Boundary) -> bool:
        return boundary.signum is not None
