"""PQN: epsilon schedule and greedy acting, Q(lambda) targets on the rollout, exact resume with
the schedules running, the metrics row, bf16, compile fallback, agents as rows, eval, sweep,
torchrun, and learning CartPole."""

from __future__ import annotations

import csv
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import fasttrain
from fasttrain.cli import main
from fasttrain.config import resolve as cfg
from fasttrain.kernels.qlambda import qlambda
from fasttrain.learners.pqn import Trainer, epsilon_at
from fasttrain.learners.pqn_config import PQNConfig
from fasttrain.run import checkpoint
from fasttrain.run.checkpoint import load_agent
from fasttrain.run.runner import run
from tests.cli import ROOT, cli_in_process
from tests.fasttrain.test_learners import assert_same

TINY = {
    "run": {"algo": "pqn", "device": "cpu", "torch_threads": 1, "numba_threads": 1},
    "game": {
        "snake": {
            "height": 6,
            "width": 6,
            "pqn": {"num_envs": 16, "num_steps": 8, "num_minibatches": 4, "update_epochs": 2},
        }
    },
    "model": {"hidden": 32},
    "log": {"progress": False, "interval_s": 1e-9, "curves": False},
}


def quiet(*_):
    pass


def tiny(steps: int, **extra) -> cfg.Config:
    data = cfg.merge(TINY, {"game": {"snake": {"pqn": {"total_timesteps": steps}}}})
    return cfg.from_dict(cfg.merge(data, extra))


def pqn_sets(**values) -> dict:
    return {"game": {"snake": {"pqn": values}}}


def rows(out: Path) -> list[dict]:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------- exploration


def test_epsilon_falls_linearly_over_the_first_tenth_of_iterations_then_stays():
    args = PQNConfig()  # 1.0 -> 0.05 over exploration_fraction = 0.1
    assert epsilon_at(args, 0, 1000) == 1.0
    assert epsilon_at(args, 50, 1000) == pytest.approx(0.525)
    assert epsilon_at(args, 99, 1000) == pytest.approx(1.0 - 0.95 * 0.99)
    assert epsilon_at(args, 100, 1000) == 0.05
    assert epsilon_at(args, 999, 1000) == 0.05
    rising = PQNConfig(start_e=0.0, end_e=0.5, exploration_fraction=0.5)
    assert epsilon_at(rising, 25, 100) == pytest.approx(0.25)
    assert epsilon_at(PQNConfig(exploration_fraction=0.0), 0, 10) == 0.05


def test_each_rollout_explores_with_its_iterations_epsilon_and_logs_it():
    trainer = Trainer(tiny(16 * 8 * 20, **pqn_sets(exploration_fraction=0.5)), warn=quiet)
    assert trainer.num_iterations == 20
    logged = [trainer.iterate()[0]["charts/epsilon"] for _ in range(12)]
    want = [epsilon_at(trainer.args, k, 20) for k in range(12)]
    assert logged == pytest.approx(want) and logged[0] == 1.0 and logged[-1] == 0.05


@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0])
def test_actions_are_greedy_except_where_the_draws_explore(epsilon):
    config = tiny(10**5, **pqn_sets(start_e=epsilon, end_e=epsilon, num_envs=256))
    trainer = Trainer(config, warn=quiet)
    trainer.rollout()
    s = trainer.storage
    with torch.inference_mode():
        q = trainer.q_network(s.obs[:-1].flatten(0, 1)).view(8, 256, -1)
    torch.testing.assert_close(s.values, q.max(dim=2).values)  # the greedy values
    greedy = q.argmax(dim=2)
    explored = trainer.explore
    assert torch.equal(s.actions[~explored], greedy[~explored])
    assert torch.equal(s.actions[explored], trainer.random_actions[explored])
    assert explored.float().mean().item() == pytest.approx(epsilon, abs=0.03)
    if epsilon == 1.0:  # uniform over every action
        counts = torch.bincount(s.actions.view(-1), minlength=4).float() / (8 * 256)
        assert torch.allclose(counts, torch.full((4,), 0.25), atol=0.03)


# ------------------------------------------------------------------------------- targets


def test_returns_are_q_lambda_of_the_rollout_with_truncation_from_final_obs():
    config = tiny(10**5, game={"snake": {"max_steps_without_food": 3}})
    trainer = Trainer(config, warn=quiet)
    trainer.rollout()
    trainer.compute_returns()
    s = trainer.storage
    rows = s.truncated.nonzero(as_tuple=True)
    assert rows[0].numel() > 0 and s.terminated.any()
    with torch.inference_mode():
        want_final = trainer.q_network(s.final_obs[rows]).max(dim=1).values
        want_last = trainer.q_network(s.obs[-1]).max(dim=1).values
    torch.testing.assert_close(s.final_values[rows], want_final)
    torch.testing.assert_close(s.last_values, want_last)
    # the final observation is the board before the reset, not the next episode's first
    assert not torch.equal(s.final_obs[rows], s.obs[1:][rows])
    want = np.zeros((8, 16), np.float32)
    inputs = (s.rewards, s.values, s.last_values, s.final_values)
    flags = (s.terminated, s.truncated)
    qlambda(*(x.numpy() for x in (*inputs, *flags)), 0.99, 0.65, want)
    assert np.array_equal(s.returns.numpy(), want)


# ------------------------------------------------------------------------------- runs


def test_a_bad_pqn_state_is_refused_on_resume_in_one_line(tmp_path):
    """The Q-network's weights and the observation the next rollout starts from are held
    against the run's before anything loads (``fasttrain.learners.savedstate``)."""
    from fasttrain.errors import RunError
    from tests.checkpoints import write_mutated

    run(tiny(16 * 8 * 2), out=tmp_path / "run", echo=quiet)
    refusals = {
        ("next_obs",): (
            lambda t: t[:, :1],
            r"^checkpoint next_obs = a uint8 tensor of shape \(16, 1, 6, 6\); expected a uint8 "
            r"tensor of shape \(16, 4, 6, 6\)$",
        ),
        ("model", "head.weight"): (
            lambda t: t.double(),
            r"^checkpoint model\.head\.weight = a float64 tensor of shape \(4, \d+\); "
            r"expected a float32 tensor of shape \(4, \d+\)$",
        ),
    }
    for k, (path, (value, message)) in enumerate(refusals.items()):
        run_dir = write_mutated(tmp_path / "run", tmp_path / f"bad{k}", path, value)
        with pytest.raises(RunError, match=message):
            run(tiny(16 * 8 * 4), resume=run_dir, echo=quiet)


def test_a_resumed_run_equals_a_straight_one_with_the_schedules_running(tmp_path):
    """Epsilon decays and the learning rate anneals over total_timesteps: the run stopped
    after 5 of 12 iterations and resumed ends bit for bit where the straight one does."""
    total = 16 * 8 * 12
    config = tiny(total, **pqn_sets(exploration_fraction=0.5))
    run(config, out=tmp_path / "straight", echo=quiet)
    stopped = run(
        config,
        out=tmp_path / "halves",
        echo=quiet,
        on_row=lambda row: int(row["global_step"]) >= 5 * 16 * 8,
    )
    assert stopped["stopped_early"] and stopped["global_step"] == 5 * 16 * 8
    run(config, resume=tmp_path / "halves", echo=quiet)
    a, b = checkpoint.load(tmp_path / "straight"), checkpoint.load(tmp_path / "halves")
    assert a["global_step"] == b["global_step"] == total
    # weights, optimizer, random streams, environments, the next observation: all of it
    assert_same(
        {k: v for k, v in a.items() if k != "time_s"}, {k: v for k, v in b.items() if k != "time_s"}
    )
    volatile = ("time_s", "sps") + tuple(k for k in rows(tmp_path / "straight")[0] if "time/" in k)

    def steady(out):
        return [{k: v for k, v in r.items() if k not in volatile} for r in rows(out)]

    assert steady(tmp_path / "straight") == steady(tmp_path / "halves")
    epsilons = [float(r["charts/epsilon"]) for r in rows(tmp_path / "halves")]
    rates = [float(r["charts/learning_rate"]) for r in rows(tmp_path / "halves")]
    assert epsilons[0] == 1.0 and epsilons[-1] == 0.05 and rates == sorted(rates, reverse=True)


def test_metrics_rows_carry_cleanrls_names_and_finite_losses(tmp_path):
    run(tiny(16 * 8 * 3), out=tmp_path / "run", echo=quiet)
    table = rows(tmp_path / "run")
    assert len(table) == 3
    for column in (
        "global_step",
        "sps",
        "charts/episodic_return",
        "charts/learning_rate",
        "charts/epsilon",
        "losses/td_loss",
        "losses/q_values",
        "losses/skipped_updates",
    ):
        assert column in table[0], column
    for row in table:
        assert np.isfinite(float(row["losses/td_loss"])) and float(row["losses/td_loss"]) >= 0
        assert np.isfinite(float(row["losses/q_values"]))
        assert float(row["losses/skipped_updates"]) == 0


def test_the_q_network_has_layer_norm_unless_turned_off():
    trainer = Trainer(tiny(10**4), warn=quiet)
    norms = [m for m in trainer.q_network.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 2  # after each of the two hidden layers
    plain = Trainer(tiny(10**4, **pqn_sets(layer_norm=False)), warn=quiet)
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in plain.q_network.modules())
    assert all(np.isfinite(v) for v in plain.iterate()[0].values())


def test_bf16_update_and_compile_fallback(monkeypatch):
    trainer = Trainer(tiny(10**4, run={"amp": "bf16"}), warn=quiet)
    assert trainer.precision == "bf16" and "bf16 update" in trainer.describe()
    before = [p.detach().clone() for p in trainer.q_network.parameters()]
    assert all(np.isfinite(v) for v in trainer.iterate()[0].values())
    assert any(
        not torch.equal(a, b) for a, b in zip(before, trainer.q_network.parameters(), strict=True)
    )

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(torch, "compile", broken)
    warnings = []
    trainer = Trainer(tiny(10**4, run={"compile": "default"}), warn=warnings.append)
    assert len(warnings) == 1 and "running eagerly" in warnings[0]
    assert all(np.isfinite(v) for v in trainer.iterate()[0].values())


def test_a_non_finite_update_is_skipped_and_counted():
    trainer = Trainer(tiny(10**4), warn=quiet)
    trainer.rollout()
    trainer.compute_returns()
    trainer.storage.returns[0, 0] = float("nan")  # poisons every minibatch it is in
    before = [p.detach().clone() for p in trainer.q_network.parameters()]
    (losses,) = trainer.update()  # a solo trainer's one member
    assert losses["losses/skipped_updates"] == 2  # one minibatch holds it in each of 2 epochs
    after = list(trainer.q_network.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))  # the others
    assert all(torch.isfinite(p).all() for p in after)


def test_agents_are_rows_in_a_multi_agent_game():
    arena = {"width": 12, "height": 12, "num_snakes": 3, "num_food": 4}
    sizes = {"num_envs": 4, "num_steps": 8, "num_minibatches": 4}
    config = cfg.from_dict(
        cfg.merge(
            TINY,
            {"game": {"name": "arena", "arena": {**arena, "pqn": sizes}}},
        )
    )
    trainer = Trainer(config, warn=quiet)
    assert trainer.rows == 12 and trainer.storage.actions.shape == (8, 12)
    assert "4 envs x 3 agents" in trainer.describe()
    (losses,) = trainer.iterate()  # a solo trainer's one member
    assert trainer.global_step == 8 * 12 and np.isfinite(losses["losses/td_loss"])


# ------------------------------------------------------------------------------- CLI


def test_cli_run_then_greedy_eval_and_play(tmp_path):
    out = tmp_path / "run"
    sets = ["game.snake.height=6", "game.snake.width=6", "model.hidden=32", "log.progress=false"]
    result = CliRunner().invoke(
        main,
        ["run", "--game", "snake", "--algo", "pqn", "--steps", "2048", "--num-envs", "32"]
        + ["--out", str(out)]
        + sum((["--set", s] for s in sets), []),
    )
    assert result.exit_code == 0, result.output
    assert (
        "learner: pqn ([pqn] applies)" in result.output
        and " eps " in result.output
        and "td " in result.output
    )
    resolved = cfg.tomllib.loads((out / "config.toml").read_text())
    assert resolved["run"]["algo"] == "pqn" and "[pqn]" in (out / "config.toml").read_text()
    assert checkpoint.load(out)["global_step"] == 2048

    act, params = load_agent(out)
    env = fasttrain.make("snake", num_envs=8, **params)
    state = checkpoint.load(out)
    config = cfg.from_dict(cfg.tomllib.loads(state["config"]))
    network = Trainer(config, warn=quiet).q_network
    network.load_state_dict(state["model"])
    with torch.inference_mode():
        assert torch.equal(act(env.obs), network(env.obs).argmax(dim=1))  # greedy Q

    evaluated = CliRunner().invoke(
        main, ["eval", "--run", str(out), "--episodes", "4", "--num-envs", "2", "--greedy"]
    )
    assert evaluated.exit_code == 0, evaluated.output
    assert "agent (greedy)" in evaluated.output
    played = CliRunner().invoke(
        main, ["play", "--checkpoint", str(out), "--steps", "3", "--fps", "0"]
    )
    assert played.exit_code == 0, played.output


@pytest.mark.posix
def test_sigterm_saves_a_checkpoint_that_resumes(tmp_path):
    out = tmp_path / "run"
    sets = ["game.snake.height=6", "game.snake.width=6", "model.hidden=32", "log.progress=false"]
    sets += ["pqn.num_envs=16", "pqn.num_steps=8", "pqn.num_minibatches=2"]
    flags = sum((["--set", s] for s in sets), [])
    command = [sys.executable, "-m", "fasttrain.cli", "run", "--game", "snake", "--algo", "pqn"]
    proc = subprocess.Popen(
        [*command, "--steps", "100000000", "--out", str(out), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (out / "metrics.csv").exists():
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    saved = checkpoint.load(out)["global_step"]
    assert saved > 0 and saved % 128 == 0
    assert int(rows(out)[-1]["global_step"]) == saved
    more = str(saved + 4 * 128)
    done = cli_in_process("run", "--resume", out, "--steps", more)  # the signal's run is a process
    assert done.returncode == 0, done.stderr
    steps = [int(r["global_step"]) for r in rows(out)]
    assert steps[-5:] == [saved + k * 128 for k in range(5)] and steps == sorted(set(steps))


@pytest.mark.skipif(importlib.util.find_spec("PIL") is None, reason="needs pillow (extra media)")
def test_a_run_writes_its_replay_gif(tmp_path):
    lines = []
    config = tiny(16 * 8 * 2, log={"replay": True, "replay_steps": 10})
    run(config, out=tmp_path / "run", echo=lines.append)
    assert (tmp_path / "run" / "replay.gif").stat().st_size > 0
    assert any("replay.gif (11 frames)" in line for line in lines)


@pytest.mark.skipif(importlib.util.find_spec("optuna") is None, reason="needs optuna")
def test_a_sweep_over_pqn_settings(tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(
        '[run]\nalgo = "pqn"\ndevice = "cpu"\ntorch_threads = 1\nnumba_threads = 1\n'
        '[game]\nname = "cartpole"\n[pqn]\ntotal_timesteps = 4096\nnum_envs = 16\n'
        "num_minibatches = 4\n[model]\nhidden = 16\n"
        '[sweep]\ntrials = 2\nobjective = "final_return"\n'
        '[sweep.params]\n"pqn.q_lambda" = { low = 0.0, high = 1.0 }\n'
    )
    result = CliRunner().invoke(
        main, ["sweep", "--config", str(sweep), "--out", str(tmp_path / "s")]
    )
    assert result.exit_code == 0, result.output
    with open(tmp_path / "s" / "trials.csv", newline="") as f:
        trials = list(csv.DictReader(f))
    assert len(trials) == 2 and {t["state"] for t in trials} == {"complete"}
    for trial in trials:  # each trial trained PQN with its sampled q_lambda
        written = cfg.tomllib.loads((Path(trial["run_dir"]) / "config.toml").read_text())
        assert written["run"]["algo"] == "pqn"
        assert written["pqn"]["q_lambda"] == pytest.approx(float(trial["pqn.q_lambda"]))
    assert 'algo = "pqn"' in (tmp_path / "s" / "best.toml").read_text()


def test_two_ranks_under_torchrun_keep_identical_q_networks(tmp_path):
    command = [sys.executable, "-m", "fasttrain", "run", "--nproc", "2", "--game", "cartpole"]
    command += ["--algo", "pqn", "--steps", str(16 * 8 * 2 * 4), "--out", str(tmp_path / "run")]
    for item in (
        "game.cartpole.pqn.num_envs=16",
        "game.cartpole.pqn.num_steps=8",
        "game.cartpole.pqn.num_minibatches=2",
        "model.hidden=16",
        "log.progress=false",
        "log.curves=false",
        "run.dist_timeout_s=30",
    ):
        command += ["--set", item]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    state = checkpoint.load(tmp_path / "run")
    (other,) = state["rank_states"]
    assert state["global_step"] == 16 * 8 * 2 * 4 and state["identity"]["world_size"] == 2
    for key in state["model"]:
        assert torch.equal(state["model"][key], other["model"][key]), key
    assert state["optimizer"]["state"]  # it stepped
    assert not torch.equal(state["next_obs"], other["next_obs"])  # each rank its own games


# ------------------------------------------------------------------------------- learning


@pytest.mark.slow
def test_pqn_learns_cartpole(tmp_path):
    """PQN with the [game.cartpole.pqn] presets reaches a mean return of 475 (the run stops at
    the first metrics row at 475 or more)."""
    config = cfg.from_dict(
        {"run": {"algo": "pqn"}, "game": {"name": "cartpole"}, "log": {"progress": False}}
    )

    def reached(row) -> bool:
        return float(row["charts/episodic_return"]) >= 475.0

    summary = run(config, out=tmp_path / "cartpole", echo=quiet, on_row=reached)
    assert summary["stopped_early"] and summary["episodic_return"] >= 475.0, summary


@pytest.mark.slow
@pytest.mark.parametrize(("game", "floor"), [("minatar-asterix", 3.0), ("minatar-seaquest", 5.0)])
def test_pqn_is_the_learner_of_asterix_and_seaquest_and_learns_them(tmp_path, game, floor):
    """The games that train with PQN by default (their preset's [run] algo) clear a low floor with
    their preset over a 3M-step schedule (random play: ~0.5 and ~0.2). Over the full 10M-step
    schedule, seeds 0-2 passed 3 (Asterix) by 1.5-2M steps and 5 (Seaquest) by 1.5-2M steps. The
    run stops at the first metrics row at the floor or more."""
    config = cfg.from_dict(
        {
            "game": {"name": game, game: {"pqn": {"total_timesteps": 3_000_000}}},
            "log": {"progress": False, "curves": False},
        }
    )
    assert config.run.algo == "pqn"

    def reached(row) -> bool:
        return float(row["charts/episodic_return"]) >= floor

    summary = run(config, out=tmp_path / "run", echo=quiet, on_row=reached)
    assert summary["stopped_early"] and summary["episodic_return"] >= floor, summary
