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
FULL = dict(
    repeats=5,
    seconds=1.0,
    train_iterations=10,
    train_repeats=3,
    train_num_envs=None,
    sb3_n_steps=2048,
)
QUICK = dict(
    repeats=3,
    seconds=0.25,
    train_iterations=1,
    train_repeats=1,
    train_num_envs=64,
    sb3_n_steps=128,
)


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
    sb3_n_steps: int
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
            "sb3_n_steps": self.sb3_n_steps,
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
) -> Plan:
    """The ``Plan`` of the CLI options; raises a one-line click error for a bad one."""
    import numba

    from fasttrain import games as registry
    from fasttrain.device import resolve_device

    valid = registry.names()
    for name in game_names:
        if name not in valid:
            raise click.BadParameter(
                f"unknown game {name!r}; valid: {', '.join(valid)}", param_hint="--game"
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
    for path in (json_path, plot_path):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise click.UsageError(f"folder of {path!r} does not exist")
    max_threads = numba.config.NUMBA_NUM_THREADS
    if threads is not None and threads > max_threads:
        raise click.BadParameter(
            f"at most {max_threads} (NUMBA_NUM_THREADS) here, got {threads}", param_hint="--threads"
        )
    backends = ["python", "cpu"] + (["cuda"] if resolved.backend == "cuda" else [])
    if backend_names:
        if "cuda" in backend_names and resolved.backend != "cuda":
            raise click.UsageError("--backend cuda needs --device cuda (or auto on a GPU)")
        backends = [b for b in backends if b in backend_names]
    preset = QUICK if quick else FULL
    repeats = repeats or preset["repeats"]
    return Plan(
        games=list(dict.fromkeys(game_names)) or valid,
        device=resolved,
        backends=backends,
        sweep={b: num_envs or (QUICK_SWEEP if quick else FULL_SWEEP)[b] for b in backends},
        quick=quick,
        repeats=repeats,
        seconds=seconds or preset["seconds"],
        train_iterations=train_iterations or preset["train_iterations"],
        train_repeats=min(repeats, preset["train_repeats"]),
        train_num_envs=train_num_envs or preset["train_num_envs"],
        sb3_n_steps=preset["sb3_n_steps"],
        seed=seed,
        threads=threads or max_threads,
        json_path=json_path,
        plot_path=plot_path,
    )
