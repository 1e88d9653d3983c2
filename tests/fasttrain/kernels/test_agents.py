"""The agents axis: per-agent buffers, per-agent auto-reset, the action check, backend parity.

Two tiny counter games defined here: every agent adds its action to its own counter; it
terminates when the counter reaches ``threshold`` and is truncated after ``max_steps`` steps of
one life. ``counter`` restarts one agent with ``reset_agent``; ``counter_whole`` has none, so
one agent ending restarts its whole environment. Only ``reset_one`` counts into ``resets`` and
only ``reset_agent`` into ``respawns``, so a test can tell which one the runtime called.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fasttrain.kernels import Field, GameSpec, KernelEnv, assert_backends_agree, rand_int
from tests.cli import ROOT
from tests.simulator import run_on_simulator


@dataclass(frozen=True)
class CounterParams:
    num_players: int = 3
    """agents per environment"""
    threshold: int = 4
    """an agent terminates when its counter reaches this"""
    max_steps: int = 3
    """an agent is truncated after this many steps of one life"""
    start_spread: int = 1
    """counters start uniform in [0, start_spread) (1: always 0, the RNG still advances)"""


def _players(p):
    return (p.num_players,)


STATE = (
    Field("counter", _players, np.int64, "(A,) each agent's counter"),
    Field("steps", _players, np.int64, "(A,) steps in each agent's current life"),
    Field("respawns", _players, np.int64, "(A,) reset_agent calls per agent"),
    Field("resets", lambda p: (), np.int64, "() reset_one calls"),
)


def reset_one(i, io, s, p):
    for a in range(p.num_players):
        s.counter[i, a] = rand_int(s.rng, i, p.start_spread)
        s.steps[i, a] = 0
    s.resets[i] += 1


def reset_agent(i, a, io, s, p):
    s.counter[i, a] = rand_int(s.rng, i, p.start_spread)
    s.steps[i, a] = 0
    s.respawns[i, a] += 1


def step_one(i, io, s, p):
    for a in range(p.num_players):
        s.counter[i, a] += io.actions[i, a]
        s.steps[i, a] += 1
        io.rewards[i, a] = io.actions[i, a]
        if io.actions[i, a] == 2:
            io.score[i, a] += 1.0  # score: how many 2s the agent played, unlike its return
        io.terminated[i, a] = s.counter[i, a] >= p.threshold
        io.truncated[i, a] = not io.terminated[i, a] and s.steps[i, a] >= p.max_steps


def observe(i, a, io, s, p):
    others = 0
    for b in range(p.num_players):
        if b != a:
            others += s.counter[i, b]
    io.obs_flat[i, a, 0] = s.counter[i, a]
    io.obs_flat[i, a, 1] = others


COUNTER = GameSpec(
    name="counter_agents",
    params_cls=CounterParams,
    state=STATE,
    obs_shape=lambda p: (2,),
    obs_dtype=np.float32,
    num_actions=3,
    reset_one=reset_one,
    step_one=step_one,
    render_text=lambda state, params: str(state["counter"]),
    num_agents=lambda p: p.num_players,
    observe=observe,
    reset_agent=reset_agent,
)
COUNTER_WHOLE = dataclasses.replace(COUNTER, name="counter_agents_whole", reset_agent=None)

BACKENDS = ["python", "cpu"]


def _env(spec, backend, num_envs=2, **params):
    env = KernelEnv(spec, num_envs, backend, spec.make_params(**params), seed=0)
    env.reset(seed=0)
    return env


def _step(env, actions):
    env.arrays["actions"][:] = np.array(actions, dtype=np.int64)
    assert env.step() == -1


def _host(env, name):
    return np.array(env.backend.to_host(env.arrays[name]))


# (num_envs * num_agents, 2) observations: [own counter, sum of the others' counters]
def _obs(*rows):
    return np.array(rows, dtype=np.float32)


# ------------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("num_players", [1, 2, 4])
def test_per_agent_buffers_have_a_row_per_agent_and_state_a_row_per_env(num_players):
    env = KernelEnv(COUNTER, 3, "python", COUNTER.make_params(num_players=num_players))
    rows = 3 * num_players
    assert (env.num_agents, env.num_rows) == (num_players, rows)
    for name in ("actions", "rewards", "terminated", "truncated", "score", "ep_return"):
        assert env.arrays[name].shape == (rows,), name
    for name in ("ep_length", "done_return", "done_length", "done_score", "done_count"):
        assert env.arrays[name].shape == (rows,), name
    assert env.arrays["obs"].shape == env.arrays["final_obs"].shape == (rows, 2)
    assert env.arrays["rng"].shape == env.arrays["resets"].shape == (3,)
    assert env.arrays["counter"].shape == env.arrays["respawns"].shape == (3, num_players)


def test_an_int_num_agents_works_like_the_function():
    spec = dataclasses.replace(COUNTER, name="counter_agents_int", num_agents=3)
    env = _env(spec, "python")
    assert (env.num_agents, env.num_rows, env.arrays["obs"].shape) == (3, 6, (6, 2))


# ------------------------------------------------------------------------------- auto-reset


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_ended_agent_restarts_alone_and_the_others_play_on(backend):
    env = _env(COUNTER, backend, threshold=4, max_steps=10)
    _step(env, [2, 2, 0, 0, 1, 0])  # counters [2, 2, 0], [0, 1, 0]
    np.testing.assert_array_equal(
        _host(env, "obs"), _obs([2, 2], [2, 2], [0, 4], [0, 1], [1, 0], [0, 1])
    )
    _step(env, [2, 1, 1, 0, 0, 0])  # env 0: [4, 3, 1], agent 0 reaches the threshold
    assert _host(env, "terminated").tolist() == [True, False, False, False, False, False]
    assert not _host(env, "truncated").any()
    assert _host(env, "final_obs")[0].tolist() == [4, 4]  # the post-step state, before respawn
    # agent 0 alone restarts; its neighbours keep their counters and step counts
    assert _host(env, "counter").tolist() == [[0, 3, 1], [0, 1, 0]]
    assert _host(env, "steps").tolist() == [[0, 2, 2], [2, 2, 2]]
    assert _host(env, "respawns").tolist() == [[1, 0, 0], [0, 0, 0]]
    assert _host(env, "resets").tolist() == [1, 1]
    np.testing.assert_array_equal(
        _host(env, "obs"), _obs([0, 4], [3, 1], [1, 3], [0, 1], [1, 0], [0, 1])
    )
    assert _host(env, "ep_return").tolist() == [0, 3, 1, 0, 1, 0]
    assert _host(env, "ep_length").tolist() == [0, 2, 2, 2, 2, 2]
    assert env.stats() == {"return": 4.0, "length": 2.0, "score": 2.0, "episodes": 1}


@pytest.mark.parametrize("backend", BACKENDS)
def test_agents_ending_together_use_reset_one_and_stats_average_over_agents(backend):
    env = _env(COUNTER, backend, threshold=4, max_steps=3)
    _step(env, [2, 2, 0, 0, 1, 0])
    _step(env, [2, 1, 1, 0, 0, 0])
    env.stats()
    _step(env, [1, 0, 1, 0, 0, 0])
    # env 0: agents 1 and 2 hit the step limit, agent 0 (respawned last step) plays on;
    # env 1: all three hit it at once, so the env restarts through reset_one
    assert _host(env, "truncated").tolist() == [False, True, True, True, True, True]
    assert not _host(env, "terminated").any()
    np.testing.assert_array_equal(
        _host(env, "final_obs")[1:], _obs([3, 3], [2, 4], [0, 1], [1, 0], [0, 1])
    )
    assert _host(env, "resets").tolist() == [1, 2]
    assert _host(env, "respawns").tolist() == [[1, 1, 1], [0, 0, 0]]
    assert _host(env, "counter").tolist() == [[1, 0, 0], [0, 0, 0]]
    assert _host(env, "steps").tolist() == [[1, 0, 0], [0, 0, 0]]
    np.testing.assert_array_equal(
        _host(env, "obs"), _obs([1, 0], [0, 1], [0, 1], [0, 0], [0, 0], [0, 0])
    )
    # returns 2+1+0, 0+1+1, then env 1's 0, 1, 0; one 2 played among those five lives
    assert env.stats() == {"return": 6 / 5, "length": 3.0, "score": 1 / 5, "episodes": 5}


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_reset_agent_one_ending_restarts_the_env_and_truncates_the_others(backend):
    env = _env(COUNTER_WHOLE, backend, threshold=4, max_steps=10)
    _step(env, [2, 2, 0, 0, 1, 0])
    _step(env, [2, 1, 1, 0, 0, 0])  # env 0: [4, 3, 1], agent 0 reaches the threshold
    assert _host(env, "terminated").tolist() == [True, False, False, False, False, False]
    assert _host(env, "truncated").tolist() == [False, True, True, False, False, False]
    np.testing.assert_array_equal(_host(env, "final_obs")[:3], _obs([4, 4], [3, 5], [1, 7]))
    assert _host(env, "resets").tolist() == [2, 1]
    assert _host(env, "counter").tolist() == [[0, 0, 0], [0, 1, 0]]
    assert _host(env, "steps").tolist() == [[0, 0, 0], [2, 2, 2]]
    np.testing.assert_array_equal(
        _host(env, "obs"), _obs([0, 0], [0, 0], [0, 0], [0, 1], [1, 0], [0, 1])
    )
    assert _host(env, "ep_return").tolist() == [0, 0, 0, 0, 1, 0]
    # returns 2+2, 2+1, 0+1 over two steps each; 2s played: two, one, none
    assert env.stats() == {"return": 8 / 3, "length": 2.0, "score": 1.0, "episodes": 3}


def test_reset_clears_every_agent_and_observes_them_all():
    env = _env(COUNTER, "cpu", threshold=100)
    _step(env, [2, 1, 0, 1, 1, 1])
    env.reset()
    assert _host(env, "resets").tolist() == [2, 2]
    assert not _host(env, "ep_return").any() and not _host(env, "score").any()
    assert not _host(env, "obs").any()
    env.state["counter"][1] = [5, 6, 7]  # the next observe sees counters set by hand
    _step(env, [0] * 6)
    np.testing.assert_array_equal(_host(env, "obs")[3:], _obs([5, 13], [6, 12], [7, 11]))


# ------------------------------------------------------------------------------- action check


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bad_action_is_reported_by_its_row_and_changes_nothing(backend):
    env = _env(COUNTER, backend)
    _step(env, [1, 2, 0, 2, 1, 0])
    before = env.state_dict()
    env.arrays["actions"][:] = [0, 1, 2, 0, 3, -1]  # env 1, agent 1 is the first bad one
    assert env.step() == 1 * 3 + 1
    for name, value in env.state_dict().items():
        if name != "actions":
            np.testing.assert_array_equal(value, before[name], err_msg=name)


# ------------------------------------------------------------------------------- backends


@pytest.mark.parametrize("spec", [COUNTER, COUNTER_WHOLE], ids=lambda spec: spec.name)
def test_python_and_cpu_agree_bit_for_bit(spec):
    params = spec.make_params(num_players=3, threshold=5, max_steps=4, start_spread=3)
    episodes = assert_backends_agree(spec, BACKENDS, num_envs=5, steps=30, seed=7, params=params)
    assert episodes > 30  # every agent ends within max_steps


# Run in a subprocess: the simulator is chosen when numba.cuda is first imported.
SIM_SCRIPT = """
import importlib.util
import sys

import numpy as np

from fasttrain.kernels import KernelEnv, assert_backends_agree

sys.path.insert(0, sys.argv[2])  # the repository root: the test module imports tests.*
module_spec = importlib.util.spec_from_file_location("agent_games", sys.argv[1])
games = importlib.util.module_from_spec(module_spec)
sys.modules["agent_games"] = games
module_spec.loader.exec_module(games)
for spec in (games.COUNTER, games.COUNTER_WHOLE):
    params = spec.make_params(threshold=5, max_steps=4, start_spread=3)
    episodes = assert_backends_agree(spec, ["cpu", "cuda"], 3, 12, seed=5, params=params)
    assert episodes > 9, episodes
    env = KernelEnv(spec, 2, "cuda", params)
    env.reset(seed=1)
    env.arrays["actions"][:] = [0, 1, 2, 0, 3, -1]
    assert env.step() == 4
print("SIMULATOR OK")
"""


def test_cuda_on_the_simulator_matches_cpu_bit_for_bit(tmp_path):
    here = Path(__file__).resolve()
    result = run_on_simulator(SIM_SCRIPT, str(here), str(ROOT), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SIMULATOR OK" in result.stdout


# ------------------------------------------------------------------------------- validation


def test_num_agents_below_one_is_refused_when_the_env_is_made():
    spec = dataclasses.replace(COUNTER, name="counter_agents_none", num_agents=lambda p: 0)
    with pytest.raises(ValueError, match="num_agents must be an int >= 1, got 0"):
        KernelEnv(spec, 2, "python", spec.make_params())
