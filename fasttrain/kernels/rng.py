"""Per-environment random numbers that compile on every backend.

Each environment owns one uint64 word of state (the ``rng`` buffer, shape ``(num_envs,)``).
Streams are seeded on the host from ``(seed, env index)`` through splitmix64, then advanced in the
kernels by xorshift64 (shifts and xors only: no 64-bit multiply overflow, identical results in
plain Python, Numba CPU and CUDA). There is no global random state anywhere.

The functions below are plain Python; ``fasttrain.kernels.build`` compiles them together with the
game that calls them. Every constant is a ``np.uint64`` so Numba never mixes signed and unsigned
integers (which it would promote to float64).
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
