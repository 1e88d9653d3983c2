"""Recurrent PPO from the outside: config errors in one line before any work, a tiny LSTM and
GRU run that loads as a stateful actor (state carried between calls, restarted per row by
``episode_starts``, refused for another number of rows), and ``eval``/``play`` on it."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import fasttrain
from fasttrain.config import resolve as cfg
from fasttrain.config.resolve import ModelConfig
from fasttrain.evaluate import evaluate, table
from fasttrain.learners.actors import PolicyActor
from fasttrain.models import make_policy
from fasttrain.run.checkpoint import load_agent
from fasttrain.run.runner import run
from tests.cli import cli_in_process

PARAMS = {"observe_velocity": False}  # the game a recurrent core is for


def tiny(core: str, steps: int = 1024):
    """A seconds-long recurrent PPO run on partially observed CartPole."""
    return cfg.from_dict(
        {
            "run": {"algo": "ppo", "device": "cpu", "torch_threads": 1, "numba_threads": 1},
            "game": {"name": "cartpole", "cartpole": PARAMS},
            "ppo": {
                "num_envs": 8,
                "num_steps": 8,
                "bptt_horizon": 4,
                "num_minibatches": 2,
                "update_epochs": 2,
                "anneal_lr": False,
                "total_timesteps": steps,
            },
            "model": {"hidden": 16, "core": core, "core_size": 16},
            "log": {"progress": False},
        }
    )


def cli(*args):
    """``fasttrain ARGS`` in this process (click's runner)."""
    return cli_in_process(*args)


def assert_one_line_error(done, *words: str):
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


# ------------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    "args, words",
    [
        # the cartpole preset's num_steps = 16 is not a multiple of 5
        (
            ["--set", "model.core=lstm", "--set", "ppo.bptt_horizon=5"],
            ["ppo.bptt_horizon = 5", "num_steps = 16"],
        ),
        # the same, with the core set for the game alone
        (
            ["--set", "game.cartpole.model.core=gru", "--set", "game.cartpole.ppo.bptt_horizon=5"],
            ["ppo.bptt_horizon = 5", "num_steps = 16"],
        ),
        (
            ["--set", "model.core=gru", "--algo", "dqn"],
            ["model.core = 'gru'", "run.algo = 'dqn'"],
        ),
        (["--set", "model.core=rnn"], ["model.core", "'rnn'", "none, lstm, gru"]),
        (["--set", "model.core=lstm", "--set", "model.core_size=0"], ["model.core_size", "0"]),
        # 3 envs * 16 steps / 16 = 3 sequences; the batch of 48 splits in 2, the sequences not
        (
            ["--num-envs", "3", "--set", "model.core=lstm"]
            + ["--set", "ppo.bptt_horizon=16", "--set", "ppo.num_minibatches=2"],
            ["3 sequences", "ppo.num_minibatches = 2"],
        ),
    ],
    ids=["horizon", "horizon-per-game", "dqn", "unknown-core", "core-size", "minibatches"],
)
def test_bad_recurrent_config_is_one_line_before_any_work(args, words, tmp_path):
    out = tmp_path / "run"
    done = cli("run", "--game", "cartpole", *args, "--out", str(out))
    assert_one_line_error(done, *words)
    assert done.stdout == ""
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_same_sizes_without_a_core_are_fine():
    """The recurrent checks apply to recurrent models only."""
    config = cfg.load(sets=["game.name=cartpole", "ppo.bptt_horizon=5", "ppo.num_envs=3"])
    assert config.model.core == "none" and config.learner.bptt_horizon == 5
    with pytest.raises(cfg.ConfigError, match="bptt_horizon = 5"):
        cfg.load(sets=["game.name=cartpole", "ppo.bptt_horizon=5", "model.core=lstm"])


# ------------------------------------------------------------------------------- a trained run


@pytest.fixture(scope="module", params=["lstm", "gru"])
def recurrent_run(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param) / "run"
    run(tiny(request.param), out=out, echo=lambda *_: None)
    return request.param, out


def observations(params: dict, num_envs: int = 6, seed: int = 1, steps: int = 3):
    """Two distinct batches of observations: after ``steps`` and ``steps + 1`` random pushes."""
    env = fasttrain.make("cartpole", num_envs=num_envs, backend="cpu", seed=seed, **params)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        env.step(torch.randint(0, 2, (num_envs,), generator=generator))
    first = env.obs.clone()
    env.step(torch.randint(0, 2, (num_envs,), generator=generator))
    return first, env.obs.clone()


def test_load_agent_gives_a_stateful_actor_that_carries_its_state(recurrent_run):
    core, out = recurrent_run
    act, params = load_agent(out)
    assert params["observe_velocity"] is False
    assert act.is_recurrent
    size = (2 if core == "lstm" else 1) * 16  # an LSTM keeps h and c side by side
    obs, _ = observations(params)
    actions = act(obs)
    assert actions.shape == (6,) and actions.dtype == torch.int64
    first = act.state.clone()
    assert first.shape == (6, size) and (first != 0).any(dim=1).all()  # every row moved on
    act(obs)  # the same observations again, from the state the first call left
    assert not torch.equal(act.state, first)
    # a fresh actor's first call on the same observations is the first call above
    fresh, _ = load_agent(out)
    assert torch.equal(fresh(obs), actions) and torch.equal(fresh.state, first)


def test_episode_starts_restart_exactly_the_rows_that_start(recurrent_run):
    _, out = recurrent_run
    act, params = load_agent(out)
    twin, _ = load_agent(out)  # the same history, never restarted
    obs, later = observations(params)
    for a in (act, twin):
        a(obs)
        a(obs)
    # every row starting: as if the actor were fresh
    fresh, _ = load_agent(out)
    fresh_actions = fresh(later)
    assert torch.equal(act(later, torch.ones(6, dtype=torch.bool)), fresh_actions)
    assert torch.equal(act.state, fresh.state)
    # some rows starting: those rows as a fresh actor's, the others as the twin's, continued
    act, _ = load_agent(out)
    for _ in range(2):
        act(obs)
    starts = torch.tensor([True, False, False, True, False, True])
    actions = act(later, starts)
    twin_actions = twin(later)  # no row restarts
    assert not torch.equal(twin.state[starts], fresh.state[starts])  # restarting shows
    assert torch.equal(act.state[starts], fresh.state[starts])
    assert torch.equal(act.state[~starts], twin.state[~starts])
    assert torch.equal(actions[starts], fresh_actions[starts])
    assert torch.equal(actions[~starts], twin_actions[~starts])
    # no row starting is the same as passing none
    no_starts, _ = load_agent(out)
    none, _ = load_agent(out)
    for a in (no_starts, none):
        a(obs)
    assert torch.equal(no_starts(later, torch.zeros(6, dtype=torch.bool)), none(later))
    assert torch.equal(no_starts.state, none.state)


def test_another_number_of_rows_is_refused_until_reset(recurrent_run):
    _, out = recurrent_run
    act, params = load_agent(out)
    obs, _ = observations(params)
    act(obs)
    held = act.state.clone()
    with pytest.raises(ValueError) as info:
        act(obs[:4])
    message = str(info.value)
    assert "\n" not in message and "6 rows" in message and "reset()" in message
    assert torch.equal(act.state, held)  # the refused call changed nothing
    with pytest.raises(ValueError) as info:  # one restart flag per row, no more, no fewer
        act(obs, torch.zeros(obs.shape[0] + 1, dtype=torch.bool))
    assert "\n" not in str(info.value) and "one per row" in str(info.value)
    assert torch.equal(act.state, held)
    act.reset()
    assert act.state is None
    fresh, _ = load_agent(out)
    assert torch.equal(act(obs[:4]), fresh(obs[:4]))
    assert torch.equal(act.state, fresh.state) and act.state.shape[0] == 4


# ------------------------------------------------------------------------------- evaluate


def alternating_actor(core: str) -> PolicyActor:
    """A greedy recurrent actor built by hand whose actions depend on its state alone: blind
    to the observations, its core iterates ``h <- tanh(1 - 2h)`` (through the LSTM's cell
    too), whose sign alternates from a zero state, so it pushes right on the first step of
    an episode, left on the second, and so on, if and only if its state restarts with each
    episode."""
    policy = make_policy((4,), np.float32, 2, ModelConfig(hidden=4, core=core, core_size=2))
    big, n = 20.0, 2  # sigmoid(20) is 1.0 in float32: a gate fully open
    gates = ["i", "f", "g", "o"] if core == "lstm" else ["r", "z", "n"]
    open_ = {"i": big, "f": -big, "g": 1.0, "o": big, "r": big, "z": -big, "n": 1.0}
    with torch.no_grad():
        for param in policy.core.parameters():
            param.zero_()
        for k, gate in enumerate(gates):
            policy.core.bias_ih[k * n : (k + 1) * n] = open_[gate]
        recurrent = gates.index("g" if core == "lstm" else "n")
        policy.core.weight_hh[recurrent * n : (recurrent + 1) * n] = -2.0 * torch.eye(n)
        policy.actor.weight.copy_(torch.tensor([[-1.0, 0.0], [1.0, 0.0]]))  # right iff h0 > 0
        policy.actor.bias.zero_()
    policy.eval()
    return PolicyActor(policy)


class Recorder:
    """A recurrent actor that records every call's observations, ``episode_starts`` and
    actions, and every ``reset()``, passing them on to the actor it wraps."""

    is_recurrent = True

    def __init__(self, inner):
        self.inner = inner
        self.calls = []  # (obs, episode_starts or None, actions)
        self.resets = 0

    def reset(self):
        self.resets += 1
        self.calls.clear()
        self.inner.reset()

    def __call__(self, obs, episode_starts=None):
        actions = self.inner(obs, episode_starts)
        starts = None if episode_starts is None else torch.as_tensor(episode_starts).clone()
        self.calls.append((torch.as_tensor(obs).clone(), starts, actions.clone()))
        return actions


def strip_time(result) -> dict:
    return {k: v for k, v in result.as_dict().items() if k != "seconds"}


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_evaluate_starts_the_actor_fresh_and_repeats_for_a_seed(core):
    act = alternating_actor(core)
    first = evaluate("cartpole", PARAMS, act, episodes=12, num_envs=4, seed=2)
    assert first.episodes == 12
    act(torch.zeros((4, 4)))  # one step in: every row's phase is now "push left"
    again = evaluate("cartpole", PARAMS, act, episodes=12, num_envs=4, seed=2)
    assert strip_time(again) == strip_time(first)
    # the state matters: the same actor not reset, one step into its phase, plays otherwise
    act.reset()
    act(torch.zeros((4, 4)))
    stale = Recorder(act)
    stale.reset = lambda: None
    assert strip_time(evaluate("cartpole", PARAMS, stale, 12, 4, seed=2)) != strip_time(first)


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_evaluate_passes_the_rows_whose_episodes_start(core):
    recorder = Recorder(alternating_actor(core))
    recorder.inner(torch.zeros((3, 4)))  # a state of another size: evaluate must reset it
    result = evaluate("cartpole", PARAMS, recorder, episodes=12, num_envs=4, seed=3)
    assert recorder.resets == 1 and len(recorder.calls) == result.steps
    # replay the same world with the recorded actions; starts are the previous step's ends
    env = fasttrain.make("cartpole", num_envs=4, backend="cpu", seed=3, **PARAMS)
    expected_starts = None
    restarts = odd_lengths = 0
    for t, (obs, starts, actions) in enumerate(recorder.calls):
        assert torch.equal(obs, env.obs), t
        if expected_starts is None:
            assert starts is None  # the first call: every row fresh anyway
        else:
            assert starts.dtype == torch.bool and starts.shape == (4,), t
            assert torch.equal(starts, expected_starts), t
            restarts += int(starts.sum())
        # right on even steps of each row's episode: its state restarted exactly at its start
        in_episode = torch.as_tensor(env.state["steps"].copy())
        assert torch.equal(actions, (in_episode % 2 == 0).long()), t
        env.step(actions)
        expected_starts = env.terminated | env.truncated
        lengths = in_episode[expected_starts] + 1
        odd_lengths += int((lengths % 2 == 1).sum())
    assert restarts >= 8  # episodes ended mid-evaluation and their rows were passed on
    # after an odd episode, a state carried on (not restarted) would push left first
    assert odd_lengths >= 2


# ------------------------------------------------------------------------------- the CLI


def table_row(stdout: str, policy: str) -> list[str]:
    for line in stdout.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == policy and len(cells) == 5:
            return cells[1:]
    raise AssertionError(f"no {policy!r} row in:\n{stdout}")


def test_cli_eval_on_a_recurrent_run(recurrent_run):
    _, out = recurrent_run
    done = cli("eval", "--run", str(out), "--episodes", "5", "--num-envs", "4", "--seed", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[0] == "cartpole: 4 envs, seed 1, first 5 episodes"
    # the run's sampling actor, seeded with the eval seed, in the run's world
    act, params = load_agent(out, greedy=False, seed=1)
    expected = evaluate("cartpole", params, act, episodes=5, num_envs=4, seed=1)
    assert expected.episodes == 5
    want = re.split(r"\s{2,}", table([expected]).splitlines()[1].strip())[1:]
    assert table_row(done.stdout, "agent") == want


def test_cli_play_on_a_recurrent_run(recurrent_run):
    _, out = recurrent_run
    done = cli("play", "--checkpoint", str(out), "--game", "cartpole", "--steps", "20")
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [
        int(m[1]) for m in re.finditer(r"cartpole  episode \d+  step (\d+)  return ", done.stdout)
    ]
    assert steps == list(range(21))
    returns = re.findall(r"return ([+-]\d+\.\d\d)", done.stdout)
    assert len(returns) >= 21 and float(returns[-1]) > 0
