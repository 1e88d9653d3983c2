"""fasttrain.bench.training: what a training timing counts and which config it times (never how
fast it is). The trainers here are stand-ins; a real PPO row: learners/test_ppo.py's
test_benchmark_training_reports_split_and_ceiling, and test_stages.py's training rows."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest

from fasttrain import device as devices
from fasttrain.bench import training
from fasttrain.config import resolve as cfg
from fasttrain.learners import LEARNERS


class FakeTrainer:
    """A trainer that steps 10 agent steps per iteration and records what was called."""

    def __init__(self, deferred: bool = False):
        self.device = SimpleNamespace(type="cpu")
        self.env = SimpleNamespace(num_envs=4, num_agents=2, nbytes=0)
        self.batch_size = 80
        self.global_step = 0
        self.calls = []
        self.timers = SimpleNamespace(
            reset=lambda: self.calls.append("reset"),
            split=lambda: {"env": 0.5, "forward": 0.25, "learn": 0.125, "other": 0.125},
        )
        if deferred:
            self.deferred = SimpleNamespace(finish=lambda: self.calls.append("finish"))

    def iterate(self):
        self.calls.append("iterate")
        self.global_step += 10


def fake_clock(monkeypatch, *readings):
    """``time.perf_counter`` in training that returns ``readings`` in turn."""
    times = iter(readings)
    monkeypatch.setattr(training, "time", SimpleNamespace(perf_counter=lambda: next(times)))


def test_measure_training_counts_the_timed_steps_after_one_warm_up(monkeypatch):
    fake_clock(monkeypatch, 100.0, 102.0)  # 2 s between the start and the end
    trainer = FakeTrainer(deferred=True)
    result = training.measure_training(trainer, 3, ceiling=lambda t: 1234.0 + t.global_step)
    # one eager iteration counts the learner's arithmetic, then the compiled steps finish,
    # then a warm-up that is neither timed nor split
    calls = ["iterate", "finish", "iterate", "reset", "iterate", "iterate", "iterate"]
    assert trainer.calls == calls
    assert result["sps"] == 30 / 2.0  # 3 iterations of 10 steps; the warm-up's 10 not counted
    assert result["flops_per_step"] == 0.0  # a stand-in does no arithmetic
    assert result["ceiling_sps"] == 1234.0 + 50  # called once, after the timing
    assert {k: result[f"time_{k}"] for k in ("env", "forward", "learn", "other")} == {
        "env": 0.5,
        "forward": 0.25,
        "learn": 0.125,
        "other": 0.125,
    }
    assert (result["num_envs"], result["num_agents"], result["batch_size"]) == (4, 2, 80)
    assert result["gpu_mem_bytes"] is None  # a CPU run


def test_measure_training_without_a_ceiling_reports_nan(monkeypatch):
    fake_clock(monkeypatch, 0.0, 4.0)
    trainer = FakeTrainer()
    result = training.measure_training(trainer, 1)
    assert trainer.calls == ["iterate", "iterate", "reset", "iterate"] and result["sps"] == 10 / 4.0
    assert math.isnan(result["ceiling_sps"])


@pytest.fixture
def built(monkeypatch):
    """benchmark_training with the config it builds recorded and nothing trained: each
    learner's trainer returns the config; measure_training returns what it was given."""
    configs = []

    def trainer(config, warn, members=None):
        configs.append(config)
        return config

    for name, learner in list(LEARNERS.items()):
        monkeypatch.setitem(LEARNERS, name, dataclasses.replace(learner, trainer=trainer))
    monkeypatch.setattr(
        training,
        "measure_training",
        lambda trainer, iterations, ceiling: {"iterations": iterations, "ceiling": ceiling},
    )
    return configs


def test_benchmark_training_times_the_default_config_with_the_learners_bench_settings(built):
    result = training.benchmark_training("dqn", "cartpole", iterations=2, seed=3)
    (config,) = built
    defaults = cfg.from_dict({"game": {"name": "cartpole"}, "run": {"algo": "dqn"}})
    assert (config.game.name, config.run.algo, config.run.seed) == ("cartpole", "dqn", 3)
    assert config.run.device == "cpu" and result["iterations"] == 2
    assert config.learner.learning_starts == 0 != defaults.learner.learning_starts  # bench's
    assert config.learner.num_envs == defaults.learner.num_envs  # the preset's, none given
    assert result["ceiling"] is LEARNERS["dqn"].ceiling and result["core"] == "none"


def test_benchmark_training_applies_num_envs_threads_core_and_sections(built):
    result = training.benchmark_training(
        "ppo",
        "cartpole",
        num_envs=8,
        threads=2,
        core="gru",
        sections={"model": {"hidden": 32}, "ppo": {"num_steps": 32}},
    )
    (config,) = built
    assert config.learner.num_envs == 8 and config.learner.num_steps == 32
    assert (config.run.torch_threads, config.run.numba_threads) == (2, 2)
    assert config.model.core == "gru" and config.model.hidden == 32
    assert result["core"] == "gru"  # the core the config trains, as the row reports it


def test_a_core_that_does_not_fit_the_rollout_is_refused_before_a_trainer_is_built(built):
    with pytest.raises(cfg.ConfigError, match="bptt_horizon"):
        training.benchmark_training(
            "ppo", "cartpole", core="lstm", sections={"ppo": {"num_steps": 16, "bptt_horizon": 5}}
        )
    assert built == []


def test_benchmark_training_reports_split_and_ceiling(monkeypatch):
    monkeypatch.setattr(devices, "cpp_compiler", lambda: None)  # run.compile auto: eager
    result = training.benchmark_training("ppo", "snake", "cpu", iterations=1, num_envs=16)
    assert result["sps"] > 0 and result["ceiling_sps"] > 0
    split = [result[f"time_{k}"] for k in ("env", "forward", "learn", "other")]
    assert all(0 <= v <= 1 for v in split) and sum(split) == pytest.approx(1.0, abs=1e-6)


def test_the_learners_arithmetic_per_step_is_every_pass_of_every_layer():
    """CartPole's PPO with a 16-wide MLP, counted by hand: each step's forward in the rollout,
    each epoch's forward and backward over the batch (the first layer's backward is its weight
    gradient alone: the observations need none), and the forward of the last observations (for
    their values)."""
    from fasttrain.learners import make_trainer

    envs, steps, epochs, h = 4, 16, 3, 16
    config = cfg.build(
        [
            (
                "test",
                {
                    "game": {"name": "cartpole"},
                    "run": {"device": "cpu", "compile": "off"},
                    "ppo": {"num_envs": envs, "num_steps": steps, "update_epochs": epochs},
                    "model": {"hidden": h, "layers": 2},
                },
            )
        ]
    )
    trainer = make_trainer(config, warn=lambda *_: None)
    first, rest = 4 * h, h * h + h * 2 + h * 1  # multiply-adds per row: layer 1, then the rest
    rows = envs * steps
    macs = rows * (first + rest)  # the rollout's forward passes
    macs += epochs * rows * ((first + rest) + (first + 2 * rest))  # forward + backward
    macs += envs * (first + rest)  # the last observations' forward, for their values
    assert training.flops_per_step(trainer) == 2 * macs / rows
