"""The runner's own pieces (fasttrain.run.runner): stop signals, run directory names, JSON values,
compile notices. Whole runs are tested with their learners and in tests/integration."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fasttrain.config import resolve as cfg
from fasttrain.run.parts import Signals
from fasttrain.run.runner import (
    StopSignals,
    compile_notices,
    default_out,
    settings_line,
)
from tests.fasttrain.run.test_parts import boundary, trainer


def test_a_stop_signal_ends_the_run_at_the_boundary_and_a_second_one_at_once():
    signals = Signals()
    t = trainer()
    with StopSignals() as stop:
        assert signals.after_iteration(boundary(t, signum=None)) is False
        signal.raise_signal(signal.SIGTERM)  # handled: noted for the next boundary
        assert stop.signum == signal.SIGTERM
        assert signals.after_iteration(boundary(t, signum=stop.signum)) is True
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)  # asked twice: the iteration in flight ends
        assert stop.signum == signal.SIGINT  # the second one names the exit code
    assert signal.getsignal(signal.SIGTERM) is not stop._handle  # handlers given back


def test_two_runs_started_in_the_same_second_get_two_directories(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt: "20260101-120000")
    config = SimpleNamespace(game=SimpleNamespace(name="snake"), run=SimpleNamespace(algo="ppo"))
    first = default_out(config)
    assert str(first) == "runs/snake-ppo-20260101-120000"
    first.mkdir(parents=True)
    second = default_out(config)
    assert str(second) == "runs/snake-ppo-20260101-120000-2"
    second.mkdir()
    assert str(default_out(config)) == "runs/snake-ppo-20260101-120000-3"


def test_compile_notices_reach_another_echo_as_whole_lines():
    lines = []
    say = compile_notices(lines.append)
    say("compiling snake for the cpu backend...", end="")
    assert lines == []  # not until the line is done
    say(" 3.2 s")
    say("compiling gae_env")
    assert lines == ["compiling snake for the cpu backend... 3.2 s", "compiling gae_env"]


def test_the_settings_line_names_the_learner_whose_section_applies():
    config = cfg.load(sets=["game.name=minatar-seaquest", "run.device=cpu"])  # PQN's preset
    fake = trainer(
        args=config.learner,
        num_iterations=10,
        steps_per_iteration=config.learner.total_timesteps // 10,
        env=SimpleNamespace(num_agents=1),
        device="cpu",
        describe=lambda: "128 envs x 32 steps = batch 4096",
    )
    text = settings_line(config, fake, Path("runs/x"), None)
    first = text.splitlines()[0]
    assert first.startswith("fasttrain: minatar-seaquest on cpu | learner: pqn ([pqn] applies) | ")
    assert "run.algo='pqn' (minatar-seaquest preset)" in text
