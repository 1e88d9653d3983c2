"""What a game declares so that the kernels can allocate, compile and launch it."""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# I/O buffers the runtime owns; a game's reset_one/step_one asks for them by argument name.
# Shapes are per row (per environment); the runtime prepends num_envs. ``obs_flat`` is the same
# memory as ``obs`` viewed as (num_envs, prod(obs_shape)), for division-free indexing.
IO_BUFFERS = ("obs", "obs_flat", "actions", "rewards", "terminated", "truncated", "rng", "score")


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float64
        return False


@dataclass(frozen=True)
class Field:
    """One state array: ``shape(params)`` is the per-environment shape (``()`` for a scalar)."""

    name: str
    shape: Callable[[object], tuple[int, ...]]
    dtype: type
    doc: str = ""


@dataclass(frozen=True)
class GameSpec:
    """Everything the kernels need to know about a game.

    ``reset_one(i, ...)`` and ``step_one(i, ...)`` are plain Python, allocation-free scalar
    functions. Their arguments after ``i`` are bound by name to the runtime's I/O buffers
    (``IO_BUFFERS``), to the game's state arrays (``state``), or to fields of ``params``.
    """

    name: str
    params_cls: type
    state: tuple[Field, ...]
    obs_shape: Callable[[object], tuple[int, ...]]
    obs_dtype: type
    num_actions: int
    reset_one: Callable
    step_one: Callable
    render_text: Callable
    num_agents: int = 1
    module: object = None

    def __post_init__(self):
        if self.num_agents != 1:
            raise NotImplementedError("multi-agent games are not supported yet (num_agents=1)")
        names = {f.name for f in self.state}
        params = {f.name for f in dataclasses.fields(self.params_cls)}
        for clash in (names & set(IO_BUFFERS), params & set(IO_BUFFERS), names & params):
            if clash:
                raise ValueError(f"game {self.name!r}: names used twice: {sorted(clash)}")
        for fn in (self.reset_one, self.step_one):
            args = list(inspect.signature(fn).parameters)
            if not args or args[0] != "i":
                raise ValueError(f"{fn.__name__} must take the env index `i` first")
            unknown = set(args[1:]) - names - params - set(IO_BUFFERS)
            if unknown:
                raise ValueError(
                    f"{self.name}.{fn.__name__} asks for unknown arguments {sorted(unknown)}; "
                    f"valid: buffers {list(IO_BUFFERS)}, state {sorted(names)}, "
                    f"params {sorted(params)}"
                )

    def make_params(self, **overrides):
        """Build validated params from keyword overrides (unknown keys raise ``ValueError``)."""
        valid = {f.name: f for f in dataclasses.fields(self.params_cls)}
        unknown = set(overrides) - set(valid)
        if unknown:
            raise ValueError(
                f"unknown parameter(s) {sorted(unknown)} for game {self.name!r}; "
                f"valid: {sorted(valid)}"
            )
        for key, value in overrides.items():
            default = getattr(self.params_cls(), key)
            if isinstance(default, bool) or isinstance(value, bool):
                ok = isinstance(value, bool) and isinstance(default, bool)
            elif isinstance(default, int):
                ok = isinstance(value, (int, np.integer))
            else:
                ok = isinstance(value, (int, float, np.integer, np.floating))
            if not ok:
                raise TypeError(
                    f"game {self.name!r} parameter {key!r} must be "
                    f"{type(default).__name__}, got {type(value).__name__} {value!r}"
                )
            if isinstance(default, float) and not _finite(value):
                raise ValueError(f"{self.name}.{key} must be finite, got {value}")
            if type(default) is int and not -(2**63) <= value < 2**63:
                raise ValueError(f"{self.name}.{key} must fit in int64, got {value}")
        return self.params_cls(**overrides)

    def param_values(self, params) -> dict:
        """Params as plain Python scalars, in field order, for kernel arguments."""
        return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
