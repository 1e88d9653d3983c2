"""fasttrain.bench.sb3_target: Stable-Baselines3 PPO timed to a CartPole return. The callback
is driven by hand on a fake clock; one short real run checks it inside SB3."""

from __future__ import annotations

import pytest

pytest.importorskip("stable_baselines3")

from fasttrain.bench import sb3_target  # noqa: E402
from fasttrain.bench.sb3_target import RolloutTarget, linear  # noqa: E402


def test_sb3_time_to_target_reports_seconds_at_a_rollout_end():
    pytest.importorskip("stable_baselines3")
    from fasttrain.bench.sb3_target import ZOO_CARTPOLE, ZOO_N_ENVS, sb3_time_to_target

    run = sb3_time_to_target(30.0, seed=0, budget_s=20.0)
    assert run["reached"] and run["ended"] == "target"
    assert 0 < run["seconds"] <= run["train_s"] <= 25
    assert run["steps"] > 0 and run["steps"] % (ZOO_N_ENVS * ZOO_CARTPOLE["n_steps"]) == 0
    assert run["best"] >= 30.0 and run["total_steps"] >= run["steps"]


def test_linear_falls_from_its_initial_value_to_zero():
    schedule = linear(1e-3)
    assert [schedule(p) for p in (1.0, 0.5, 0.0)] == [1e-3, 5e-4, 0.0]


class Clock:
    """``time.perf_counter`` that reads ``now``."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def rollout(callback, clock, timesteps, returns, at):
    """One rollout by hand, as SB3 calls its callback: start (the previous update done, at
    ``at`` seconds), one step whose infos end episodes with ``returns``, the rollout's end."""
    clock.now = at
    callback.on_rollout_start()
    callback.num_timesteps = timesteps
    callback.locals["infos"] = [{"episode": {"r": r}} for r in returns] + [{}]
    go_on = callback._on_step()
    callback.on_rollout_end()
    return go_on


def test_the_clock_is_read_after_the_update_that_follows_the_reaching_rollout(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(sb3_target, "time", clock)
    callback = RolloutTarget(100.0, budget_s=10.0)  # the clock starts here, at 0
    assert rollout(callback, clock, 256, [50.0], at=0.5)  # nothing done yet: no reading
    assert (callback.last, callback.best, callback.train_s) == (50.0, 50.0, 0.0)
    assert rollout(callback, clock, 512, [], at=3.0)  # no episode ended: figures kept
    assert (callback.last, callback.best, callback.train_s) == (50.0, 50.0, 3.0)
    assert rollout(callback, clock, 768, [120.0, 100.0], at=4.0)  # mean 110: reached
    assert callback.reached_at == 768 and callback.seconds is None  # its update not done
    assert not rollout(callback, clock, 1024, [10.0], at=5.0)  # the update done at 5 s: stop
    assert callback.seconds == 5.0 and callback.reached_at == 768
    assert callback.best == 110.0 and callback.last == 10.0
    clock.now = 6.0
    callback.on_training_end()
    assert callback.seconds == 5.0 and callback.train_s == 6.0


def test_the_budget_stops_a_run_that_does_not_reach_the_value(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(sb3_target, "time", clock)
    callback = RolloutTarget(1e9, budget_s=2.0)
    assert rollout(callback, clock, 256, [20.0], at=0.1)
    assert rollout(callback, clock, 512, [30.0], at=1.9)
    assert not rollout(callback, clock, 768, [25.0], at=2.0)
    assert callback.seconds is None and callback.reached_at is None and callback.best == 30.0
