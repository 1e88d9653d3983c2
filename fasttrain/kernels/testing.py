"""Checkers for kernel code: one game stepped on several backends must agree bit for bit."""

from __future__ import annotations

import numpy as np

from .env import KernelEnv
from .spec import GameSpec

# Compared first, so a difference is reported where it starts (final_obs depends on them).
_FIRST = ("obs", "rewards", "terminated", "truncated")


def assert_backends_agree(
    spec: GameSpec, backends, num_envs: int, steps: int, seed: int = 0, params=None
) -> int:
    """Step ``spec`` on every backend with the same seed and actions; assert identical results.

    After the reset and after every step, every buffer (observations, rewards, terminated,
    truncated, ``final_obs`` where an episode ended, the RNG, episode counters, stat sums and
    the game's state arrays) and the episode stats must be bit-identical to the first backend's.

    Args:
        spec: the game.
        backends: backend names (``python``, ``cpu``, ``cuda``); the first is the reference.
        num_envs: environments per backend.
        steps: steps to take; actions are drawn uniformly with NumPy from ``seed``.
        seed: seeds the environments and the actions.
        params: the game's params (default ``spec.make_params()``).

    Returns:
        The number of episodes that ended, so a caller can require that some did.

    Raises:
        AssertionError: naming the backend, the step and the array that differ.
    """
    backends = list(backends)
    if len(backends) < 2:
        raise ValueError(f"assert_backends_agree needs two or more backends, got {backends}")
    params = spec.make_params() if params is None else params
    envs = [KernelEnv(spec, num_envs, backend, params, seed) for backend in backends]
    for env in envs:
        env.reset(seed=seed)
    gen = np.random.default_rng(seed)
    actions = gen.integers(0, envs[0].num_actions, (steps, envs[0].num_rows), dtype=np.int64)
    _check_agree(envs, "reset")
    episodes = 0
    for t in range(steps):
        for env in envs:
            with env.backend.on_stream(env.stream):
                env.arrays["actions"][...] = env.xp.asarray(actions[t])
            if env.step() != -1:
                raise AssertionError(f"{env.backend.name} refused an in-range action at step {t}")
        episodes += _check_agree(envs, t)
    return episodes


def _check_agree(envs: list[KernelEnv], when) -> int:
    """Assert ``envs`` hold identical buffers and stats; returns the episodes that just ended."""
    reference, *others = envs
    ref = {name: reference.backend.to_host(a) for name, a in reference.arrays.items()}
    ended = ref["terminated"] | ref["truncated"]
    names = [*_FIRST, *(name for name in ref if name not in _FIRST)]
    for env in others:
        where = f"{reference.spec.name}: {env.backend.name} vs {reference.backend.name}"
        for name in names:
            want, got = ref[name], env.backend.to_host(env.arrays[name])
            if name == "final_obs":  # defined only in rows whose episode ended
                want, got = want[ended], got[ended]
            if not np.array_equal(want, got):
                np.testing.assert_array_equal(got, want, err_msg=f"{where}, {name!r}, step {when}")
    stats = reference.stats()  # after the comparisons: it clears the stat sums
    for env in others:
        where = f"{reference.spec.name}: {env.backend.name} vs {reference.backend.name}"
        got_stats = env.stats()
        if got_stats != stats:
            raise AssertionError(f"{where}, stats, step {when}: {got_stats} != {stats}")
    return int(ended.sum())
