"""fasttrain.bench.measure alone: what one timing counts (never how fast it is)."""

from __future__ import annotations

import math

import pytest

from fasttrain.bench import measure, time_repeats


def test_time_repeats_counts_env_steps():
    calls = []

    def run(n):
        calls.append(n)
        sum(range(2000 * n))

    sps = time_repeats(run, steps_per_call=10, repeats=3, seconds=0.01)
    assert len(sps) == 3 and all(s > 0 for s in sps)
    assert calls[0] == 1  # warm-up first, outside the timings


def fake_time_repeats(calls: list):
    """A ``time_repeats`` that measures nothing: it makes 3 calls of ``run`` and records what it
    was told; the env is the owner of ``sync`` (bench_env passes ``env.synchronize``)."""

    def fake(run, steps_per_call, repeats, seconds, sync=lambda: None):
        run(3)
        calls.append((steps_per_call, getattr(sync, "__self__", None)))
        return [1.0] * repeats

    return fake


@pytest.mark.parametrize(
    "game, num_envs, params, rows",
    [
        ("arena", 2, None, 16),  # 8 snakes per env: 16 agent-steps per step
        ("arena", 3, {"num_snakes": 2, "num_food": 3, "width": 10, "height": 10}, 6),
        ("snake", 5, None, 5),  # one agent per env: env-steps
    ],
)
def test_bench_env_counts_agent_rows_and_takes_params(monkeypatch, game, num_envs, params, rows):
    calls = []
    monkeypatch.setattr(measure, "time_repeats", fake_time_repeats(calls))
    sps, nbytes = measure.bench_env(game, "cpu", num_envs, 2, 0.01, seed=0, params=params)
    assert sps == [1.0, 1.0]
    ((steps_per_call, env),) = calls
    assert steps_per_call == rows == env.num_rows and env.num_envs == num_envs
    for key, value in (params or {}).items():
        assert getattr(env.params, key) == value
    assert nbytes == env.nbytes
    # run(3) stepped every row 3 times: lengths of ended and running episodes add up
    lengths = env.arrays["done_length"].sum() + env.arrays["ep_length"].sum()
    assert lengths == 3 * rows


def test_bench_env_times_the_arena():
    sps, nbytes = measure.bench_env("arena", "cpu", 2, repeats=2, seconds=0.01)
    assert len(sps) == 2 and all(math.isfinite(s) and s > 0 for s in sps)
    assert nbytes > 0


def test_bench_baseline_steps_every_arena_row(monkeypatch):
    sps = measure.bench_baseline("arena", repeats=1, seconds=0.01)
    assert len(sps) == 1 and math.isfinite(sps[0]) and sps[0] > 0
    calls = []
    monkeypatch.setattr(measure, "time_repeats", fake_time_repeats(calls))
    measure.bench_baseline("arena", repeats=1, seconds=0.01)
    ((steps_per_call, _),) = calls
    assert steps_per_call == 8  # one python env of 8 snakes: 8 agent-steps per step
