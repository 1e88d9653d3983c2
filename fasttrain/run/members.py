"""A run's members as the runner sees them: what each is (``MemberRun``: its folder, config and
the state it resumes), what the run was asked (``Plan``), and member ``k`` of a trainer as the
run's parts see a trainer (``MemberView``), every member reading the trainer's episode stats
and environments once per boundary (``Shared``). A solo run is one member; a population's
members share one trainer (``learners/population.py``) and one loop (``fasttrain.run.runner``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from fasttrain.config.resolve import Config
from fasttrain.run import population as population_run
from fasttrain.run.population import Member
from fasttrain.run.rundir import json_safe


@dataclass
class MemberRun:
    """One member of a run: its folder, its config and the checkpoint state it resumes (a solo
    run is the one member in the run directory itself)."""

    folder: Path
    config: Config
    state: dict | None = None
    member: Member | None = None  # a population's: its name, seed and variant
    newest: bool = True  # whether ``state`` is the folder's checkpoint.pt (not its previous)


@dataclass
class Plan:
    """What a run was asked to do: its config and folder, whether it resumes, and its
    members (``population``: a population's, given or read from its folder on resume)."""

    config: Config
    out: Path
    resuming: bool
    population: bool
    members: list | None = None
    on_row: object = None
    configure: object = None  # a resumed member's config from its checkpoint's config table
    echo: object = print
    locks: list = field(default_factory=list)  # a population's member folders' RunLocks

    def member_config(self, table: dict) -> Config:
        """A resumed member's config: ``configure(table)`` (the command's settings on top of
        the member's saved ones), or the saved config with this run's total steps."""
        if self.configure is not None:
            return self.configure(table)
        from fasttrain.config import resolve as cfg

        saved = cfg.from_dict(table, "checkpoint")
        steps = self.config.learner.total_timesteps
        if saved.learner.total_timesteps != steps:
            saved = saved.with_learner("--steps", total_timesteps=steps)
        return saved

    def on_row_of(self, k: int):
        """Member ``k``'s ``on_row`` (one for every member, or a list of one each)."""
        return self.on_row[k] if isinstance(self.on_row, (list, tuple)) else self.on_row


class Shared:
    """What every member reads at a boundary, read from the trainer once: each member's
    episode means (clearing the env's sums), and the environments' state for checkpoints."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.read: dict = {}  # what -> (iteration, value)

    def _at_boundary(self, what: str, read):
        held = self.read.get(what)
        if held is None or held[0] != self.trainer.iteration:
            held = self.read[what] = (self.trainer.iteration, read())
        return held[1]

    def stats(self, k: int) -> dict:
        return self._at_boundary("stats", self.trainer.member_stats)[k]

    def env_state(self) -> dict:
        return self._at_boundary("env", self.trainer.env.state_dict)


class MemberEnv:
    """Member ``k``'s environments as the parts read them: sizes, its episode means."""

    def __init__(self, trainer, k: int, shared: Shared):
        env = trainer.env
        self.num_envs = env.num_envs // trainer.num_members
        self.num_agents, self.obs_shape = env.num_agents, env.obs_shape
        self.k, self.shared = k, shared

    def stats(self) -> dict:
        return self.shared.stats(self.k)


class MemberView:
    """Member ``k`` of a trainer as the run's parts see a trainer: its counters, its share of
    the environments and their episodes, its learning rate and its checkpoint state."""

    def __init__(self, trainer, k: int, config: Config, shared: Shared):
        self.trainer, self.k, self.config, self.shared = trainer, k, config, shared
        self.args = config.learner
        self.env = MemberEnv(trainer, k, shared)
        self.ctx, self.timers, self.device = trainer.ctx, trainer.timers, trainer.device
        self.num_iterations = trainer.num_iterations
        self.steps_per_iteration = trainer.steps_per_iteration
        self.precision = trainer.precision

    @property
    def global_step(self) -> int:
        return self.trainer.global_step

    @property
    def iteration(self) -> int:
        return self.trainer.iteration

    @property
    def learning_rate(self) -> float:
        return self.trainer.learning_rates()[self.k]

    def state_dict(self) -> dict:
        return self.trainer.member_state(self.k, self.shared.env_state())


class PopulationLine:
    """A population's log line (``population_run.progress_line``), every ``log.interval_s``
    and at its end."""

    def __init__(self, trainer, every: list):
        self.trainer, self.every = trainer, every
        self.start = self.last = time.perf_counter()
        self.first_step = trainer.global_step

    def due(self, now: float, interval: float, end: bool) -> bool:
        return now - self.last >= interval or end

    def text(self, live: set, now: float) -> str:
        self.last = now
        scores = [self.every[k].episodes.means["score"] for k in sorted(live)]
        steps = self.trainer.global_step - self.first_step
        return population_run.progress_line(
            self.trainer.global_step, steps, len(self.every), live, scores, now - self.start
        )


def summary(plan, view, run, parts, first_step, stopped_by, curriculum, ranks, alone) -> dict:
    """``summary.json`` of a member: its steps, speed, last episode means and how it ended."""
    config = run.config
    elapsed = time.perf_counter() - parts.clock.start
    means = parts.episodes.means
    summary = {
        "game": config.game.name,
        "algo": config.run.algo,
        "global_step": view.global_step,
        "wall_s": round(elapsed, 2),
        "sps": round((view.global_step - first_step) / elapsed, 1),
        "episodic_return": json_safe(means["return"]),
        "episodic_length": json_safe(means["length"]),
        "score": json_safe(means["score"]),
        "precision": view.precision,
        "interrupted": stopped_by is not None,
        "stopped_early": bool(parts.stopper and parts.stopper.stopped_early),
        "run_dir": str(run.folder),
    }
    if curriculum is not None:
        summary["curriculum_stage"] = curriculum.stage + 1
        summary["curriculum_stages"] = curriculum.num_stages
    if ranks.enabled:  # the ranks, and rank 0's seconds in the gradient all-reduce
        summary["world_size"] = ranks.world
        summary["allreduce_s"] = round(view.ctx.comm_s, 3)
    if plan.population:
        summary["stopped_alone"] = alone
        summary["member"] = {"seed": run.member.seed, "sets": list(run.member.sets)}
    return summary
