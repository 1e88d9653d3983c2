"""The contract every registered game meets, checked on the cpu backend.

Parametrized over ``fasttrain.games.names()``: a new game gets the whole suite for free.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fasttrain
from fasttrain import games
from fasttrain.kernels import assert_backends_agree, get_backend
from fasttrain.kernels.env import PER_AGENT, objects

GAMES = games.names()
SINGLE_AGENT = [name for name in GAMES if not games.get(name).agent_game]
AGENT_GAMES = [name for name in GAMES if games.get(name).agent_game]
# small worlds for the uncompiled reference (whose cost grows with the agents per env)
SMALL = {
    "arena": dict(width=12, height=12, num_snakes=4, num_food=3, vision=2, max_episode_steps=25)
}
# games whose episodes outlast the random play of a test: a time limit ends some
SHORT = {"minatar-freeway": dict(max_episode_steps=60)}
# games whose first observation is the same for every seed (as in the original game)
FIXED_START = {"minatar-asterix", "minatar-seaquest", "minatar-space_invaders"}
# (envs, steps) of the bit-for-bit run, smaller where the uncompiled step is costly (the MinAtar
# games are also checked step by step against the minatar package in their own tests)
REFERENCE_SIZE = {name: (16, 2000) for name in GAMES if name.startswith("minatar-")}
# the bit-for-bit run's size: Snake's 32 envs still end ~9,000 episodes (64 took 14 s)
BIT_FOR_BIT_SIZE = {**REFERENCE_SIZE, "snake": (32, 4000)}


def _random_actions(env, num_steps, seed):
    gen = np.random.default_rng(seed)
    return gen.integers(0, env.num_actions, (num_steps, env.num_rows), dtype=np.int64)


def _call(fn, env, arrays, *index, out="obs"):
    """Call a game's scalar ``fn`` on env ``i`` (and agent ``a``) over ``arrays``, with the
    objects the runtime builds; ``out="final_obs"`` points ``io.obs``/``io.obs_flat`` at the
    final buffers."""
    io, s, p = objects(env.spec, env.params, arrays, final_obs=out == "final_obs")
    with np.errstate(over="ignore"):
        fn(*index, io, s, p)


def test_registry_lists_snake():
    assert "snake" in GAMES
    assert GAMES == sorted(GAMES)


@pytest.mark.parametrize("game", GAMES)
def test_shapes_dtypes_and_value_ranges(game):
    spec = games.get(game)
    env = fasttrain.make(game, num_envs=16, backend="cpu", seed=1)
    expected_shape = tuple(spec.obs_shape(env.params))
    assert env.obs_shape == expected_shape
    rows = 16 * spec.agents(env.params)
    assert env.num_rows == rows and env.num_agents == spec.agents(env.params)
    assert tuple(env.obs.shape) == (rows, *expected_shape)
    assert tuple(env.final_obs.shape) == (rows, *expected_shape)
    for name, array in env.arrays.items():  # one row per agent, or per env (rng, state)
        assert array.shape[0] == (rows if name in PER_AGENT else 16), name
    obs_dtype = torch.from_numpy(np.zeros(1, dtype=spec.obs_dtype)).dtype
    assert env.obs.dtype == obs_dtype == env.obs_dtype
    assert env.num_actions == spec.actions(env.params) >= 1
    for actions in _random_actions(env, 300, seed=2):
        obs, rewards, terminated, truncated = env.step(actions)
        assert obs.data_ptr() == env.obs.data_ptr() and obs.dtype == obs_dtype
        assert rewards.dtype == torch.float32 and rewards.shape == (rows,)
        assert torch.isfinite(rewards).all()
        assert terminated.dtype == torch.bool and truncated.dtype == torch.bool
        assert not (terminated & truncated).any()
        if obs_dtype.is_floating_point:
            assert torch.isfinite(obs).all()


@pytest.mark.parametrize("game", SINGLE_AGENT)
def test_auto_reset_final_obs_and_stats_match_reference(game):
    """Every ended row: final_obs is step_one's observation, then reset_one ran on the row."""
    env = fasttrain.make(game, num_envs=16, backend="cpu", seed=3, **SHORT.get(game, {}))
    state_names = [f.name for f in env.spec.state]
    running_return = np.zeros(16)
    running_length = np.zeros(16, dtype=np.int64)
    ended_returns, ended_lengths, ended_scores = [], [], []
    for actions in _random_actions(env, 400, seed=4):
        before = {name: array.copy() for name, array in env.arrays.items()}
        env.step(actions)
        running_return += env.rewards.numpy()
        running_length += 1
        done = (env.terminated | env.truncated).numpy()
        for i in np.flatnonzero(done):
            ref = {name: array.copy() for name, array in before.items()}
            ref["actions"][:] = actions
            _call(env.spec.step_one, env, ref, i)
            np.testing.assert_array_equal(env.final_obs[i].numpy(), ref["obs"][i])
            assert env.rewards[i].item() == ref["rewards"][i]
            assert env.terminated[i].item() == ref["terminated"][i]
            assert env.truncated[i].item() == ref["truncated"][i]
            ended_scores.append(float(ref["score"][i]))
            ref["score"][i] = 0
            _call(env.spec.reset_one, env, ref, i)  # a fresh start from the same stream
            np.testing.assert_array_equal(env.obs[i].numpy(), ref["obs"][i])
            for name in [*state_names, "rng"]:
                np.testing.assert_array_equal(env.arrays[name][i], ref[name][i], err_msg=name)
            assert env.arrays["ep_length"][i] == 0 and env.arrays["score"][i] == 0
            ended_returns.append(running_return[i])
            ended_lengths.append(running_length[i])
            running_return[i], running_length[i] = 0.0, 0
    assert len(ended_returns) >= 10, "random play should end some episodes"
    stats = env.stats()
    assert stats["episodes"] == len(ended_returns)
    assert stats["length"] == pytest.approx(np.mean(ended_lengths), rel=1e-12)
    assert stats["return"] == pytest.approx(np.mean(ended_returns), rel=1e-9, abs=1e-9)
    assert stats["score"] == pytest.approx(np.mean(ended_scores), rel=1e-9, abs=1e-9)
    assert env.stats() == {}


@pytest.mark.parametrize("game", AGENT_GAMES)
def test_agents_auto_reset_final_obs_and_stats_match_reference(game):
    """Per agent: final_obs is observe() after the game's step, then only the ended agents
    restart (reset_agent; reset_one when all ended), then every agent observes."""
    env = fasttrain.make(game, num_envs=4, backend="cpu", seed=3, **SMALL.get(game, {}))
    spec, n, agents = env.spec, env.num_envs, env.num_agents
    assert agents > 1, "the contract wants several agents per environment here"
    state_names = [f.name for f in spec.state]
    running_return = np.zeros(env.num_rows)
    running_length = np.zeros(env.num_rows, dtype=np.int64)
    ended_returns, ended_lengths, ended_scores = [], [], []
    partial = 0  # steps where some but not all agents of an env ended
    for actions in _random_actions(env, 300, seed=4):
        before = {name: array.copy() for name, array in env.arrays.items()}
        env.step(actions)
        running_return += env.rewards.numpy()
        running_length += 1
        ref = {name: array.copy() for name, array in before.items()}
        ref["actions"][:] = actions
        for i in range(n):
            rows = slice(i * agents, (i + 1) * agents)
            _call(spec.step_one, env, ref, i)
            done = ref["terminated"][rows] | ref["truncated"][rows]
            whole = done.all() if spec.reset_agent is not None else done.any()
            if whole:
                ref["truncated"][rows] |= ~ref["terminated"][rows]
                done = ref["terminated"][rows] | ref["truncated"][rows]
            for a in np.flatnonzero(done):
                _call(spec.observe, env, ref, i, a, out="final_obs")
                row = i * agents + a
                np.testing.assert_array_equal(env.final_obs[row].numpy(), ref["final_obs"][row])
                ended_scores.append(float(ref["score"][row]))
                ended_returns.append(running_return[row] + 0.0)
                ended_lengths.append(running_length[row])
                running_return[row], running_length[row] = 0.0, 0
                ref["score"][row] = 0
            if whole:
                _call(spec.reset_one, env, ref, i)
            elif done.any():
                partial += 1
                for a in np.flatnonzero(done):
                    _call(spec.reset_agent, env, ref, i, a)
            for a in range(agents):
                _call(spec.observe, env, ref, i, a)
        for name in ("obs", "rewards", "terminated", "truncated", "score", *state_names, "rng"):
            np.testing.assert_array_equal(env.arrays[name], ref[name], err_msg=name)
    assert len(ended_returns) >= 10, "random play should end some agents' episodes"
    assert partial > 0, "some agents should restart while the others play on"
    stats = env.stats()
    assert stats["episodes"] == len(ended_returns)
    assert stats["length"] == pytest.approx(np.mean(ended_lengths), rel=1e-12)
    assert stats["return"] == pytest.approx(np.mean(ended_returns), rel=1e-9, abs=1e-9)
    assert stats["score"] == pytest.approx(np.mean(ended_scores), rel=1e-9, abs=1e-9)


def _trajectory(env, actions):
    out = []
    for a in actions:
        obs, rewards, terminated, truncated = env.step(a)
        out.append((obs.clone(), rewards.clone(), terminated.clone(), truncated.clone()))
    return out


@pytest.mark.parametrize("game", GAMES)
def test_determinism(game):
    a = fasttrain.make(game, num_envs=8, backend="cpu", seed=5)
    b = fasttrain.make(game, num_envs=8, backend="cpu", seed=5)
    c = fasttrain.make(game, num_envs=8, backend="cpu", seed=6)
    assert torch.equal(a.obs, b.obs)
    if game not in FIXED_START:
        assert not torch.equal(a.obs, c.obs)
    actions = _random_actions(a, 200, seed=7)
    first, second, other = _trajectory(a, actions), _trajectory(b, actions), _trajectory(c, actions)
    for x, y in zip(first, second, strict=True):
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)
    assert any(not torch.equal(x[0], z[0]) for x, z in zip(first, other, strict=True))
    a.reset(seed=5)  # reseeding replays the same trajectory on a used env
    for x, y in zip(first, _trajectory(a, actions), strict=True):
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)


@pytest.mark.parametrize("game", GAMES)
def test_state_dict_continues_bit_for_bit_and_rejects_a_misfit(game):
    a = fasttrain.make(game, num_envs=8, backend="cpu", seed=5)
    actions = _random_actions(a, 120, seed=3)
    _trajectory(a, actions[:60])
    saved = a.state_dict()
    assert all(not np.shares_memory(saved[k], v) for k, v in a.arrays.items())
    b = fasttrain.make(game, num_envs=8, backend="cpu", seed=99)
    b.load_state_dict(saved)
    for x, y in zip(_trajectory(a, actions[60:]), _trajectory(b, actions[60:]), strict=True):
        for u, v in zip(x, y, strict=True):
            assert torch.equal(u, v)
    before = {k: v.copy() for k, v in b.arrays.items()}
    with pytest.raises(ValueError, match="'obs' does not fit"):
        b.load_state_dict({**saved, "obs": saved["obs"][:4]})
    with pytest.raises(ValueError, match="'rng' has dtype"):
        b.load_state_dict({**saved, "rng": saved["rng"].astype(np.int32)})
    for key, value in b.arrays.items():  # nothing was written by the refused loads
        assert np.array_equal(value, before[key]), key


@pytest.mark.parametrize("game", GAMES)
def test_no_recompilation(game):
    env = fasttrain.make(game, num_envs=8, backend="cpu", seed=0)
    actions = _random_actions(env, 200, seed=1)
    env.step(actions[0])
    launchers = get_backend("cpu").compile(env.spec)  # what every cpu env of the game launches
    compiled = launchers.num_compiled()
    assert compiled >= 2  # step and reset launchers
    for a in actions[1:]:
        env.step(a)
    env.step(torch.from_numpy(actions[0]).to(torch.int32))
    storage = torch.zeros((2, env.num_rows, *env.obs_shape), dtype=env.obs_dtype)
    env.step(actions[1], obs_out=storage[1])
    env.reset(seed=3)
    again = fasttrain.make(game, num_envs=8, backend="cpu", seed=9)
    again.step(actions[2])
    bigger = fasttrain.make(game, num_envs=33, backend="cpu", seed=9)
    bigger.step()
    assert get_backend("cpu").compile(again.spec) is launchers
    assert launchers.num_compiled() == compiled


@pytest.mark.parametrize("game", GAMES)
def test_cpu_matches_python_reference_bit_for_bit(game):
    """Every buffer, final_obs where episodes ended, and the stats, after every step."""
    spec = games.get(game)
    params = spec.make_params(**SMALL.get(game, {}), **SHORT.get(game, {}))
    agents = spec.agents(params)
    envs, steps = BIT_FOR_BIT_SIZE.get(game, (64, 4000))
    episodes = assert_backends_agree(
        spec, ["python", "cpu"], max(1, envs // agents), steps // agents, seed=11, params=params
    )
    assert episodes > 0


@pytest.mark.parametrize("game", GAMES)
def test_parallel_cpu_matches_python_reference(game, parallel_threads):
    """Environments split over threads must not interfere (the suite otherwise runs on one)."""
    spec = games.get(game)
    params = spec.make_params(**SMALL.get(game, {}))
    steps = 20 if game in REFERENCE_SIZE else 50  # the costly references: fewer steps
    assert_backends_agree(spec, ["python", "cpu"], 512, steps, seed=13, params=params)
