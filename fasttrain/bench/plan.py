"""What ``fasttrain bench`` measures: the presets, the sweeps and the ``Plan`` built from the CLI.

Every option is checked here, before anything is measured, so a bad option ends in one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from fasttrain.errors import ConfigError

if TYPE_CHECKING:
    from fasttrain.device import Device

# Default num_envs sweeps per backend; the python reference steps envs in a Python loop.
FULL_SWEEP = {
    "python": [1, 16, 64, 256],
    "cpu": [64, 256, 1024, 4096, 16384],
    "cuda": [4096, 65536, 262144, 1048576, 4194304],  # up to 2**22
}
QUICK_SWEEP = {"python": [64], "cpu": [256, 4096], "cuda": [4096, 262144]}
# The python reference steps ~18k env-steps/s: larger sweeps would take minutes per step.
PYTHON_MAX_ENVS = 4096
# One benchmark_training call builds a trainer and runs a warm-up iteration, the timed iterations
# and the learner ceiling, so training repeats are whole calls and there are fewer of them.
# --quick trains 64 envs instead of the default config's batch, which alone takes a minute here.
# Time-to-target runs are capped by training seconds per run (and by the default config's
# total_timesteps); a game without a budget is left out. --quick leaves Snake out: its runs take
# minutes (the preset reaches score ~26 in ~4 minutes on 2 cores).
FULL = dict(
    repeats=5,
    seconds=1.0,
    train_iterations=10,
    train_repeats=3,
    train_num_envs=None,
    sb3_n_steps=2048,
    target_seeds=3,
    target_budget_s={"cartpole": 60.0, "snake": 300.0, "sb3": 120.0},
)
QUICK = dict(
    repeats=3,
    seconds=0.25,
    train_iterations=1,
    train_repeats=1,
    train_num_envs=64,
    sb3_n_steps=128,
    target_seeds=1,
    target_budget_s={"cartpole": 30.0, "sb3": 20.0},
)
# --quick answers "how fast is this here" in about a minute: these games' cpu env rows, their
# per-step baselines, one PPO training row (the first game's) with its ceiling, the peers and
# CartPole's time to target; no compile-time subprocesses. `--game all` (or names) widens it.
QUICK_GAMES = ("snake", "cartpole")
# The time-to-target rows: game -> (metric, values) its default config is timed to reach; one run
# per seed records every value. Stable-Baselines3 PPO runs beside cartpole's row, to the same
# mean return on Gymnasium's CartPole-v1.
TARGETS = {"cartpole": ("return", (475.0,)), "snake": ("score", (10.0, 20.0))}
SB3_TARGET_GAME = "cartpole"
# model.core values --core takes: fasttrain.models.CORES without "none" (kept here so the CLI
# does not import torch to list its options).
RECURRENT_CORES = ("lstm", "gru")


@dataclass(frozen=True)
class Plan:
    """Everything one ``fasttrain bench`` run measures and writes, checked before it starts."""

    games: list[str]
    device: Device  # of the training rows; a cuda device adds the cuda env rows
    backends: list[str]  # backends of the env rows, in order
    sweep: dict[str, list[int]]  # backend -> num_envs of its env rows
    quick: bool
    repeats: int  # timed repeats per figure
    seconds: float  # seconds per timed repeat
    train_iterations: int  # iterations per benchmark_training call
    train_repeats: int  # benchmark_training calls per training row
    train_num_envs: int | None  # None: the game's default config
    cores: tuple[str, ...]  # model.core of the extra PPO training rows, beside feed-forward
    sb3_n_steps: int
    train_games: tuple  # games that get training rows
    learners: tuple  # learners of the training rows
    compile_times: bool  # cold and warm compile timed in fresh processes
    targets: bool  # time-to-target rows are measured
    targets_only: bool  # and nothing else
    target_games: dict[str, tuple[str, tuple[float, ...]]]  # game -> (metric, values) measured
    sb3_target: float | None  # mean return SB3 PPO is timed to on CartPole-v1 (None: no row)
    target_seeds: int  # runs per time-to-target row: seeds seed, seed + 1, ...
    target_budget_s: dict[str, float]  # game (or "sb3") -> training seconds per run
    seed: int
    threads: int  # Numba and torch threads
    json_path: str | None
    plot_path: str | None

    def settings(self) -> dict:
        """The plan as written under ``settings`` in the JSON."""
        return {
            "games": self.games,
            "device": self.device.type,
            "backends": self.backends,
            "sweep": self.sweep,
            "quick": self.quick,
            "repeats": self.repeats,
            "seconds_per_repeat": self.seconds,
            "train_iterations": self.train_iterations,
            "train_repeats": self.train_repeats,
            "train_num_envs": self.train_num_envs or "default config",
            "cores": list(self.cores),
            "sb3_n_steps": self.sb3_n_steps,
            "train_games": list(self.train_games),
            "learners": list(self.learners),
            "compile_times": self.compile_times,
            "targets": {
                "games": {
                    g: {"metric": m, "values": list(v)} for g, (m, v) in self.target_games.items()
                },
                "sb3_return": self.sb3_target,
                "seeds": self.target_seeds,
                "budget_s": self.target_budget_s,
            }
            if self.targets
            else None,
            "seed": self.seed,
        }


def parse_num_envs(ctx, param, value):
    """``"64,256"`` -> ``[64, 256]``; None stays None (the per-backend defaults)."""
    if value is None:
        return None
    try:
        sizes = [int(part) for part in value.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(n < 1 for n in sizes):
        raise click.BadParameter(
            f"expected a comma-separated list of positive integers such as 64,256, got {value!r}"
        )
    return sorted(set(sizes))


def check_options(
    game_names, device, json_path, plot_path, threads, targets, targets_only, cores
) -> Device:
    """Every option checked before anything is measured: one click error line for a bad one;
    returns the device."""
    import numba

    from fasttrain import games as registry
    from fasttrain.device import resolve_device

    valid = registry.names()
    for name in game_names:
        if name not in valid and name != "all":
            raise click.BadParameter(
                f"unknown game {name!r}; valid: all, {', '.join(valid)}", param_hint="--game"
            )
    try:
        resolved = resolve_device(device)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--device") from None
    if plot_path:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.UsageError(
                "--plot needs matplotlib: pip install 'fasttrain[plot]'"
            ) from None
    if targets_only and not targets:
        raise click.UsageError("--targets-only and --no-targets leave nothing to measure")
    if targets_only and plot_path:
        raise click.UsageError("--plot draws the env rows, which --targets-only leaves out")
    for core in cores:
        if core not in RECURRENT_CORES:
            raise click.BadParameter(
                f"unknown core {core!r}; valid: {', '.join(RECURRENT_CORES)}", param_hint="--core"
            )
    if targets_only and cores:
        raise click.UsageError("--core adds training rows, which --targets-only leaves out")
    for path in (json_path, plot_path):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise click.UsageError(f"folder of {path!r} does not exist")
    max_threads = numba.config.NUMBA_NUM_THREADS
    if threads is not None and threads > max_threads:
        raise click.BadParameter(
            f"at most {max_threads} (NUMBA_NUM_THREADS) here, got {threads}", param_hint="--threads"
        )
    return resolved


def plan_backends(backend_names, quick: bool, device_backend: str) -> list[str]:
    """The backends of the env rows: those named (``--backend``), else every one the device
    has (less ``python`` with ``--quick``: the baseline row stands for it)."""
    backends = ["python", "cpu"] + (["cuda"] if device_backend == "cuda" else [])
    if backend_names:
        if "cuda" in backend_names and device_backend != "cuda":
            raise click.UsageError("--backend cuda needs --device cuda (or auto on a GPU)")
        backends = [b for b in backends if b in backend_names]
    elif quick:  # the baseline row stands for the uncompiled reference
        backends.remove("python")
    return backends


def plan_games(game_names, quick: bool, valid: list[str]) -> list[str]:
    """The games measured: ``all``, those named (once each, in order), else the default ones."""
    if "all" in game_names:
        return valid
    return list(dict.fromkeys(game_names)) or (list(QUICK_GAMES) if quick else valid)


def plan_targets(games, targets: bool, budgets: dict) -> dict:
    """The time-to-target games: those measured with a target and a budget (``targets`` on)."""
    return {g: TARGETS[g] for g in games if targets and g in TARGETS and g in budgets}


def make_plan(
    game_names,
    device,
    num_envs,
    backend_names,
    quick,
    json_path,
    plot_path,
    threads,
    repeats,
    seconds,
    train_iterations,
    train_num_envs,
    seed,
    targets=True,
    targets_only=False,
    cores=(),
) -> Plan:
    """The ``Plan`` of the CLI options; raises a one-line click error for a bad one."""
    import numba

    from fasttrain import games as registry

    resolved = check_options(
        game_names, device, json_path, plot_path, threads, targets, targets_only, cores
    )
    backends = plan_backends(backend_names, quick, resolved.backend)
    preset = QUICK if quick else FULL
    repeats = repeats or preset["repeats"]
    games = plan_games(game_names, quick, registry.names())
    from fasttrain.learners import LEARNERS

    target_games = plan_targets(games, targets, preset["target_budget_s"])
    return Plan(
        games=games,
        device=resolved,
        backends=backends,
        sweep={b: num_envs or (QUICK_SWEEP if quick else FULL_SWEEP)[b] for b in backends},
        quick=quick,
        repeats=repeats,
        seconds=seconds or preset["seconds"],
        train_iterations=train_iterations or preset["train_iterations"],
        train_repeats=min(repeats, preset["train_repeats"]),
        train_num_envs=train_num_envs or preset["train_num_envs"],
        cores=tuple(dict.fromkeys(cores)),
        sb3_n_steps=preset["sb3_n_steps"],
        train_games=tuple(games[:1] if quick else games),
        learners=("ppo",) if quick else tuple(LEARNERS),
        compile_times=not quick,
        targets=targets,
        targets_only=targets_only,
        target_games=target_games,
        sb3_target=TARGETS[SB3_TARGET_GAME][1][0] if SB3_TARGET_GAME in target_games else None,
        target_seeds=preset["target_seeds"],
        target_budget_s=dict(preset["target_budget_s"]),
        seed=seed,
        threads=threads or numba.config.NUMBA_NUM_THREADS,
        json_path=json_path,
        plot_path=plot_path,
    )
