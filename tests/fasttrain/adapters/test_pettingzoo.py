"""The PettingZoo adapter: PettingZoo's own API test, observations against the kernel's rows,
agents leaving after their first life, idle slots, reset, seeding and one-line errors."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import fasttrain

pettingzoo = pytest.importorskip("pettingzoo")  # in the test extra: CI runs this file
from gymnasium.spaces import Discrete  # noqa: E402
from pettingzoo.test import parallel_api_test, parallel_seed_test  # noqa: E402

from fasttrain.adapters.pettingzoo import parallel_env  # noqa: E402

ARENA = dict(width=12, height=12, num_snakes=3, num_food=2, vision=2)
GAMES = {"arena": ARENA, "snake": {}, "cartpole": {}}
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360


def random_actions(env, rng) -> dict:
    return {agent: int(rng.integers(env.env.num_actions)) for agent in env.agents}


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("game", list(GAMES))
def test_parallel_api_test_passes(game):
    env = parallel_env(game, seed=0, **GAMES[game])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its complaints (e.g. "Live agent was not given") fail
        parallel_api_test(env, num_cycles=300)
    parallel_seed_test(lambda: parallel_env(game, seed=0, **GAMES[game]), num_cycles=50)


def test_agents_spaces_and_metadata():
    env = parallel_env("arena", seed=0, **ARENA)
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"]
    assert env.agents == []  # until reset()
    box = env.observation_space("agent_1")
    assert box.dtype == np.uint8 and box.shape == (5, 5)
    assert np.all(box.low == 0) and np.all(box.high == 5)  # the arena's obs_bounds
    assert env.action_space("agent_2") == Discrete(4)
    assert env.action_space("agent_0") is not env.action_space("agent_1")  # seeded apart
    assert env.metadata["name"] == "arena" and env.metadata["is_parallelizable"] is True
    with pytest.raises(ValueError, match="unknown agent 'agent_3'") as excinfo:
        env.observation_space("agent_3")
    assert "agent_0..agent_2" in one_line(excinfo)
    snake = parallel_env("snake", seed=0, height=6, width=7)
    assert snake.possible_agents == ["agent_0"]
    assert snake.observation_space("agent_0").shape == (4, 6, 7)
    assert parallel_env("cartpole").action_space("agent_0").n == 2


def test_observations_match_the_kernel_and_removed_agents_play_idle():
    """A twin kernel stepped with the same actions, and action 0 in the rows of removed
    agents, matches the adapter's returns and its whole world state, until every agent ends."""
    env = parallel_env("arena", seed=3, **ARENA)
    twin = fasttrain.make("arena", num_envs=1, seed=3, **ARENA)
    obs, infos = env.reset()
    assert set(obs) == set(infos) == set(env.possible_agents)
    for a, agent in enumerate(env.possible_agents):
        np.testing.assert_array_equal(obs[agent], twin.obs[a].numpy())
    rng = np.random.default_rng(0)
    removed = []
    for _ in range(500):
        acting = list(env.agents)
        actions = random_actions(env, rng)
        twin_actions = np.zeros(3, dtype=np.int64)  # removed agents' slots play action 0
        for agent, action in actions.items():
            twin_actions[int(agent.removeprefix("agent_"))] = action
        obs, rewards, terminated, truncated, infos = env.step(actions)
        twin.step(twin_actions)
        for result in (obs, rewards, terminated, truncated, infos):
            assert list(result) == acting  # every agent that acted, and only those
        for agent in acting:
            a = int(agent.removeprefix("agent_"))
            ended = bool(twin.terminated[a] or twin.truncated[a])
            assert terminated[agent] is bool(twin.terminated[a])
            assert truncated[agent] is bool(twin.truncated[a])
            assert rewards[agent] == float(twin.rewards[a])
            expected = twin.final_obs[a] if ended else twin.obs[a]  # the life's last obs
            np.testing.assert_array_equal(obs[agent], expected.numpy())
            assert (agent in env.agents) is not ended
            if ended:
                removed.append(agent)
        for name, array in env.env.state.items():
            np.testing.assert_array_equal(array, twin.state[name], err_msg=name)
        if not env.agents:
            break
    assert not env.agents and sorted(removed) == env.possible_agents


def test_returned_arrays_are_copies():
    env = parallel_env("arena", seed=0, **ARENA)
    obs, _ = env.reset()
    kept = {agent: o.copy() for agent, o in obs.items()}
    rng = np.random.default_rng(1)
    for _ in range(5):
        if not env.agents:
            break
        env.step(random_actions(env, rng))
    for agent in env.possible_agents:
        np.testing.assert_array_equal(obs[agent], kept[agent])
        assert not np.shares_memory(obs[agent], env.env.arrays["obs"])


def test_agent_removed_after_its_life_ends_and_reset_brings_all_back():
    env = parallel_env("arena", seed=0, **ARENA)
    env.reset()
    # agent_0 runs up into the wall (at most 12 rows away); the others turn in a tight square
    for t in range(12):
        actions = {agent: [3, 1, 2, 0][t % 4] for agent in env.agents}
        actions["agent_0"] = 0
        _, rewards, terminated, _, _ = env.step(actions)
        if terminated["agent_0"]:
            break
    assert terminated["agent_0"] and rewards["agent_0"] == -1.0
    assert "agent_0" not in env.agents
    with pytest.raises(ValueError, match="'agent_0', which has ended") as excinfo:
        env.step({agent: 0 for agent in env.possible_agents})
    one_line(excinfo)
    obs, infos = env.reset()
    assert env.agents == env.possible_agents
    assert set(obs) == set(infos) == set(env.possible_agents)
    for a, agent in enumerate(env.possible_agents):
        np.testing.assert_array_equal(obs[agent], env.env.obs[a].numpy())
    env.step(dict.fromkeys(env.agents, 0))  # agent_0 plays again


def test_single_agent_episode_ends_with_the_final_observation():
    env = parallel_env("cartpole", seed=0)
    env.reset()
    terminated = {"agent_0": False}
    steps = 0
    while not terminated["agent_0"] and steps < 200:
        obs, rewards, terminated, truncated, _ = env.step({"agent_0": 1})
        assert rewards == {"agent_0": 1.0}
        steps += 1
    assert env.agents == [] and terminated["agent_0"] and not truncated["agent_0"] and steps > 3
    final = obs["agent_0"]
    assert abs(final[0]) > X_LIMIT or abs(final[2]) > THETA_LIMIT  # not the respawned start
    with pytest.raises(ValueError, match="call reset") as excinfo:
        env.step({})
    one_line(excinfo)


def test_truncation_ends_the_agent_too():
    env = parallel_env("snake", seed=0, max_episode_steps=3)
    env.reset()
    for t in range(3):  # a square: right, down, left never dies in 3 steps
        _, _, terminated, truncated, _ = env.step({"agent_0": [1, 2, 3][t]})
    assert truncated == {"agent_0": True} and terminated == {"agent_0": False}
    assert env.agents == []


def test_bad_actions_raise_one_line_errors_and_step_nothing():
    env = parallel_env("arena", seed=0, **ARENA)
    with pytest.raises(ValueError, match="call reset"):
        env.step({})
    env.reset()
    before = env.env.state_dict()
    good = dict.fromkeys(env.agents, 1)
    cases = [
        ({**good, "snake_0": 1}, ValueError, "'snake_0', which is unknown"),
        ({**good, "agent_1": 4}, ValueError, r"action 4 for 'agent_1' is out of range.*0\.\.3"),
        ({**good, "agent_2": -1}, ValueError, "action -1 for 'agent_2' is out of range"),
        (
            {"agent_0": 1, "agent_2": 1},
            ValueError,
            r"no action for playing agent\(s\) \['agent_1'\]",
        ),
        ({**good, "agent_0": 1.0}, TypeError, "action for 'agent_0' must be an int"),
        ({**good, "agent_0": True}, TypeError, "must be an int"),
        ([1, 1, 1], TypeError, "actions must be a dict"),
    ]
    for actions, error, match in cases:
        with pytest.raises(error, match=match) as excinfo:
            env.step(actions)
        one_line(excinfo)
    after = env.env.state_dict()
    for name in before:
        if name != "actions":
            np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    env.step({agent: np.int64(a) for a, agent in enumerate(env.agents)})  # NumPy ints are fine
    with pytest.raises(ValueError, match="seed"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match="render_mode"):
        parallel_env("arena", render_mode="human", **ARENA)


def test_seeding_is_deterministic():
    def rollout(env, **reset_kwargs):
        obs, _ = env.reset(**reset_kwargs)
        frames = [env.env.render(0), obs]
        rng = np.random.default_rng(7)
        for _ in range(40):
            if not env.agents:
                break
            frames.append(env.step(random_actions(env, rng)))
        return frames

    first = rollout(parallel_env("arena", seed=5, **ARENA))
    reseeded = parallel_env("arena", seed=0, **ARENA)
    rollout(reseeded, seed=9)
    assert _equal(rollout(reseeded, seed=5), first)  # reset(seed=s) == parallel_env(seed=s)
    other = rollout(parallel_env("arena", seed=6, **ARENA))
    assert first[0] != other[0]
    # unseeded resets draw their seeds from the last seed given: the same sequence twice
    a, b = parallel_env("arena", seed=5, **ARENA), parallel_env("arena", seed=0, **ARENA)
    a.reset()
    b.reset(seed=5)
    pictures = []
    for env in (a, b):
        pictures.append([rollout(env)[0] for _ in range(3)])
    assert pictures[0] == pictures[1]
    assert len({first[0], *pictures[0]}) == 4  # each reset a new map


def _equal(x, y) -> bool:
    """Deep equality of nested dicts, lists, tuples, strings and arrays."""
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_equal(x[k], y[k]) for k in x)
    if isinstance(x, (tuple, list)):
        return len(x) == len(y) and all(_equal(u, v) for u, v in zip(x, y, strict=True))
    return x == y if isinstance(x, str) else np.array_equal(x, y)


def test_render_ansi():
    env = parallel_env("arena", seed=0, render_mode="ansi", **ARENA)
    env.reset()
    picture = env.render()
    assert picture == env.env.render(0)
    assert picture.count("\n") == 11 and "A" in picture and "#" in picture
    assert parallel_env("cartpole").render() is None
    env.close()


def test_missing_pettingzoo_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # `import pettingzoo` now fails
    monkeypatch.delitem(sys.modules, "fasttrain.adapters.pettingzoo")
    with pytest.raises(ImportError) as excinfo:
        import fasttrain.adapters.pettingzoo  # noqa: F401
    assert one_line(excinfo) == (
        "fasttrain.adapters.pettingzoo needs pettingzoo: pip install 'fasttrain[pettingzoo]'"
    )
