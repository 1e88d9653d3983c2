"""Per-environment random numbers that compile on every backend.

Each environment owns one uint64 word of state (the ``rng`` buffer, shape ``(num_envs,)``).
Streams are seeded on the host from ``(seed, env index)`` through splitmix64, then advanced in the
kernels by xorshift64 (shifts and xors only: no 64-bit multiply overflow, identical results in
plain Python, Numba CPU and CUDA). There is no global random state anywhere.

The functions below are plain Python; ``fasttrain.kernels.build`` compiles them together with the
game that calls them. The host's side is at the end: the seeds an env takes, checked
(``check_seeds``), and spread over its environments (``population_streams``). Every constant is
a ``np.uint64`` so Numba never mixes signed and unsigned integers (which it would promote to
float64).
"""

from __future__ import annotations

import numpy as np

_U13 = np.uint64(13)
_U7 = np.uint64(7)
_U17 = np.uint64(17)
_U32 = np.uint64(32)
_U40 = np.uint64(40)
_INV_2_24 = 1.0 / 16777216.0


def next_u32(rng, i):
    """Advance stream ``i`` and return 32 random bits (as a uint64 below 2**32)."""
    x = rng[i]
    x ^= x << _U13
    x ^= x >> _U7
    x ^= x << _U17
    rng[i] = x
    return x >> _U32


def rand_int(rng, i, n):
    """Uniform integer in ``[0, n)`` for ``0 < n < 2**32`` (Lemire's multiply-shift)."""
    return np.int64((next_u32(rng, i) * np.uint64(n)) >> _U32)


def rand_float(rng, i):
    """Uniform float in ``[0, 1)`` with 24 random bits (exact in float32)."""
    x = rng[i]
    x ^= x << _U13
    x ^= x >> _U7
    x ^= x << _U17
    rng[i] = x
    return np.float64(x >> _U40) * _INV_2_24


# ---------------------------------------------------------------- host-side seeding (NumPy)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 output function, vectorised over a uint64 array."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def seed_streams(seed: int, num_envs: int) -> np.ndarray:
    """Initial xorshift64 states for ``num_envs`` streams from one integer seed.

    Args:
        seed: any Python integer (reduced modulo 2**64).
        num_envs: number of streams.

    Returns:
        uint64 array of shape ``(num_envs,)``, never zero (xorshift's fixed point).
    """
    base = splitmix64(np.array([seed % 2**64], dtype=np.uint64))[0]
    states = splitmix64(base ^ np.arange(num_envs, dtype=np.uint64))
    states[states == 0] = _GOLDEN
    return states


def check_int(value, name: str) -> int:
    """``value`` as a Python int: any integer, NumPy's included, but not a bool or a float."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def check_seed(seed) -> int:
    """``seed`` as a Python int in ``[0, 2**64)`` (NumPy integers too); one-line error otherwise."""
    seed = check_int(seed, "seed")
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed}")
    return seed


_SEEDS_FORM = "an int in [0, 2**64) or a non-empty sequence of such ints (a population's seeds)"


def check_seeds(seed, num_envs: int | None = None) -> int | tuple[int, ...]:
    """``seed`` checked: one int (see ``check_seed``), or a population's seeds, a non-empty
    list, tuple, range or 1-D integer array of them, returned as a tuple of Python ints whose
    length divides ``num_envs`` (when given); one-line error otherwise."""
    if not isinstance(seed, (list, tuple, range, np.ndarray)):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be {_SEEDS_FORM}, got {type(seed).__name__} {seed!r}")
        return check_seed(seed)
    if isinstance(seed, np.ndarray) and seed.ndim != 1:
        raise TypeError(f"seed must be {_SEEDS_FORM}, got a {seed.ndim}-D array")
    if len(seed) == 0:
        raise ValueError(f"seed must be {_SEEDS_FORM}, got an empty {type(seed).__name__}")
    seeds = []
    for k, value in enumerate(seed):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(
                f"seed[{k}] must be an int in [0, 2**64), got {type(value).__name__} {value!r}"
            )
        if not 0 <= value < 2**64:
            raise ValueError(f"seed[{k}] must be an int in [0, 2**64), got {value}")
        seeds.append(int(value))
    if num_envs is not None and num_envs % len(seeds):
        raise ValueError(
            f"{len(seeds)} seeds do not divide num_envs = {num_envs}: a population of M seeds "
            "needs num_envs a multiple of M (num_envs // M environments per seed)"
        )
    return tuple(seeds)


def population_streams(seed, num_envs: int) -> np.ndarray:
    """The rng words of ``num_envs`` environments seeded with ``check_seeds``' output: one int
    seeds them all (``seed_streams``); M seeds give M blocks of ``num_envs // M`` environments,
    block k seeded exactly as a solo env of that size made with ``seed[k]``."""
    if isinstance(seed, int):
        return seed_streams(seed, num_envs)
    size = num_envs // len(seed)
    return np.concatenate([seed_streams(s, size) for s in seed])
