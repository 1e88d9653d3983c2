"""Is this environment state one the game could have produced? The check ``load_state_dict``
makes on every array from a file before any kernel sees it.

A checkpoint's SHA-256 says its bytes are intact, not that its values are sane: anyone can write a
valid digest. The compiled kernels index arrays with state values and check nothing (a Snake
``length`` of 2e9 or a body cell of 1e8 would write outside its buffers; an rng word of 0 is
xorshift's fixed point and makes a rejection-sampling loop spin forever). So each value is held to
what the game declares: every state field's ``low``/``high`` (``Field``), the game's
``check_state`` invariants, and the runtime's own rules for its buffers below.
"""

from __future__ import annotations

import numpy as np

from .spec import GameSpec

# runtime buffers that count (never negative)
_COUNTS = ("ep_length", "done_length", "done_count")


class StateError(ValueError):
    """An environment state value its game cannot produce (one line: env, array, value)."""


def _first(bad: np.ndarray) -> int:
    """The environment (leading-axis row) of the first True in ``bad``."""
    return int(np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape)[0])


def _value(array: np.ndarray, bad: np.ndarray):
    return array.reshape(-1)[int(np.flatnonzero(bad)[0])].item()


def _bool_problem(name: str, array: np.ndarray) -> str | None:
    raw = array.view(np.uint8)  # a bool array's bytes from a file may hold any value
    bad = raw > 1
    if bad.any():
        return f"env row {_first(bad)}: {name} holds byte {_value(raw, bad)}; a bool is 0 or 1"
    return None


def _counter_bounds(array: np.ndarray, low, high) -> tuple:
    """``[low, high]`` held within ``±2**(bits - 2)`` for a signed integer array of 32 bits or
    more: a counter (steps, episode lengths, timers) never gets that far from 0 in play, and one
    at its dtype's edge would wrap round to the other edge at its next increment."""
    if array.dtype.kind != "i" or array.dtype.itemsize < 4:
        return low, high
    edge = 2 ** (8 * array.dtype.itemsize - 2)
    return (-edge if low is None else max(low, -edge)), (edge if high is None else min(high, edge))


def _range_problem(name: str, array: np.ndarray, low, high, unit: str) -> str | None:
    """The first value of ``array`` outside ``[low, high]`` (or not finite), or None."""
    low, high = _counter_bounds(array, low, high)
    bad = np.zeros(array.shape, dtype=bool)
    if array.dtype.kind == "f":
        bad |= ~np.isfinite(array)
    if low is not None:
        bad |= array < low
    if high is not None:
        bad |= array > high
    if not bad.any():
        return None
    valid = "finite" if low is None and high is None else f"{_bound(low)} to {_bound(high)}"
    return f"{unit} {_first(bad)}: {name} = {_value(array, bad)!r}; valid: {valid}"


def _bound(x) -> str:
    return "any" if x is None else f"{x:g}" if isinstance(x, float) else str(x)


def state_problem(spec: GameSpec, params, arrays: dict, num_actions: int) -> str | None:
    """What is wrong with ``arrays`` (host arrays by name, as ``state_dict`` gives them), or
    ``None`` when every value is one the game and its runtime could have produced."""
    for name, array in arrays.items():
        if array.dtype == np.bool_:
            problem = _bool_problem(name, array)
            if problem:
                return problem
    rng = arrays["rng"]
    if (rng == 0).any():
        env = _first(rng == 0)
        return f"env {env}: rng = 0, the generator's fixed point (it would draw 0 forever)"
    runtime = {
        "actions": (0, num_actions - 1),
        **{name: (0, None) for name in _COUNTS},
        **{name: (None, None) for name in ("rewards", "score", "ep_return")},
        **{name: (None, None) for name in ("done_return", "done_score")},
    }
    if spec.obs_categories:
        runtime["obs"] = runtime["final_obs"] = (0, spec.obs_categories - 1)
    elif np.dtype(spec.obs_dtype).kind == "f":
        runtime["obs"] = runtime["final_obs"] = (None, None)
    for name, (low, high) in runtime.items():
        problem = _range_problem(name, arrays[name], low, high, "row")
        if problem:
            return problem
    for field in spec.state:
        low, high = field.bounds(params)
        array = arrays[field.name]
        if low is None and high is None and array.dtype.kind not in "fi":
            continue
        problem = _range_problem(field.name, array, low, high, "env")
        if problem:
            return problem
    if spec.check_state is not None:
        return spec.check_state({f.name: arrays[f.name] for f in spec.state}, params)
    return None


def check_state(spec: GameSpec, params, arrays: dict, num_actions: int) -> None:
    """``StateError`` naming the game and the first value it could not have produced."""
    problem = state_problem(spec, params, arrays, num_actions)
    if problem:
        raise StateError(f"game {spec.name!r} state, {problem}")
