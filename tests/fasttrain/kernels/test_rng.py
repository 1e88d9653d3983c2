"""Per-env RNG: host seeding (splitmix64) and the in-kernel xorshift64 draws."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from fasttrain.kernels import rand_float, rand_int, seed_streams, splitmix64
from fasttrain.kernels.build import retarget
from fasttrain.kernels.rng import next_u32

MASK = 2**64 - 1
GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _unxorshift_right(y, s):
    x = y
    for _ in range(64 // s + 1):
        x = y ^ (x >> s)
    return x


def _unxorshift_left(y, s):
    x = y
    for _ in range(64 // s + 1):
        x = (y ^ (x << s)) & MASK
    return x


def splitmix64_inverse(z: int) -> int:
    """The x with splitmix64(x) == z (splitmix64 is a bijection on 64-bit words)."""
    z = _unxorshift_right(z, 31)
    z = (z * pow(MIX2, -1, 2**64)) & MASK
    z = _unxorshift_right(z, 27)
    z = (z * pow(MIX1, -1, 2**64)) & MASK
    z = _unxorshift_right(z, 30)
    return (z - GOLDEN) & MASK


def xorshift_preimage(y: int) -> int:
    """The state x whose xorshift64 (13, 7, 17) successor is y."""
    return _unxorshift_left(_unxorshift_right(_unxorshift_left(y, 17), 7), 13)


# ------------------------------------------------------------------------------- seeding


def test_seed_streams_deterministic_and_prefix_stable():
    a = seed_streams(42, 16)
    assert a.dtype == np.uint64 and a.shape == (16,)
    np.testing.assert_array_equal(a, seed_streams(42, 16))
    # env i's stream depends on (seed, i) only, not on how many envs there are
    np.testing.assert_array_equal(seed_streams(42, 5), a[:5])


def test_seed_streams_distinct_over_seeds_and_envs():
    streams = np.concatenate([seed_streams(seed, 64) for seed in range(100)])
    assert len(np.unique(streams)) == streams.size
    assert np.all(streams != 0)
    # huge and negative seeds are reduced modulo 2**64
    np.testing.assert_array_equal(seed_streams(-1, 4), seed_streams(2**64 - 1, 4))
    assert not np.array_equal(seed_streams(2**64, 4), seed_streams(1, 4))


def test_seed_streams_never_zero_even_at_splitmix_zero():
    # choose the one seed whose env-0 stream would be splitmix64's zero output
    base = splitmix64_inverse(0)
    seed = splitmix64_inverse(base)
    assert int(splitmix64(np.array([seed], dtype=np.uint64))[0]) == base
    assert int(splitmix64(np.array([base], dtype=np.uint64))[0]) == 0
    states = seed_streams(seed, 3)
    assert np.all(states != 0)
    np.testing.assert_array_equal(
        states[1:], splitmix64(np.uint64(base) ^ np.arange(1, 3, dtype=np.uint64))
    )


# ------------------------------------------------------------------------------- draws


def _draw_ints(rng, n, count):
    out = np.empty(count, dtype=np.int64)
    with np.errstate(over="ignore"):
        for k in range(count):
            out[k] = rand_int(rng, k % rng.shape[0], n)
    return out


@pytest.mark.parametrize("n", [1, 2, 7, 144, 2**32 - 1])
def test_rand_int_in_range(n):
    draws = _draw_ints(seed_streams(n, 8), n, 4000)
    assert draws.min() >= 0 and draws.max() < n
    if n > 1:
        assert len(np.unique(draws)) > 1
    if n == 2**32 - 1:  # both halves of a large range are reached
        assert draws.min() < 2**31 <= draws.max()


def test_rand_int_roughly_uniform():
    n, count = 10, 20000
    counts = np.bincount(_draw_ints(seed_streams(7, 8), n, count), minlength=n)
    expected = count / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 40.0  # 9 degrees of freedom: p < 1e-5 for a fair generator


def test_rand_int_and_rand_float_extremes():
    # a state whose next 32 output bits are all ones: the largest draw
    top = xorshift_preimage(0xFFFFFFFF << 32 | 0x1234)
    rng = np.array([top], dtype=np.uint64)
    with np.errstate(over="ignore"):
        assert int(next_u32(rng.copy(), 0)) == 0xFFFFFFFF
        assert rand_int(rng.copy(), 0, 10) == 9
        x = rand_float(rng.copy(), 0)
    assert x < 1.0 and x == 1.0 - 2.0**-24
    # the smallest draw: 0
    low = np.array([xorshift_preimage(0x5678)], dtype=np.uint64)
    with np.errstate(over="ignore"):
        assert rand_int(low.copy(), 0, 10) == 0
        assert rand_float(low.copy(), 0) == 0.0


def test_rand_float_in_unit_interval():
    rng = seed_streams(3, 4)
    with np.errstate(over="ignore"):
        draws = np.array([rand_float(rng, k % 4) for k in range(8000)])
    assert draws.min() >= 0.0 and draws.max() < 1.0
    assert abs(draws.mean() - 0.5) < 0.02
    np.testing.assert_array_equal(draws.astype(np.float32), draws)  # 24 bits: exact in float32
    assert len(np.unique(draws)) > 7900


def _draw_both(rng, n, ints, floats):
    for k in range(ints.shape[0]):
        ints[k] = rand_int(rng, k % rng.shape[0], n)
        floats[k] = rand_float(rng, k % rng.shape[0])


def test_compiled_draws_equal_python_bit_for_bit():
    compiled = retarget(_draw_both, numba.njit, {})
    count = 3000
    for n in (3, 1000, 2**31 + 11):
        rng_py, rng_nb = seed_streams(n, 5), seed_streams(n, 5)
        ints_py, ints_nb = np.empty(count, np.int64), np.empty(count, np.int64)
        floats_py, floats_nb = np.empty(count), np.empty(count)
        with np.errstate(over="ignore"):
            _draw_both(rng_py, n, ints_py, floats_py)
        compiled(rng_nb, n, ints_nb, floats_nb)
        np.testing.assert_array_equal(ints_nb, ints_py)
        np.testing.assert_array_equal(floats_nb, floats_py)
        np.testing.assert_array_equal(rng_nb, rng_py)
        assert ints_py.max() < n
